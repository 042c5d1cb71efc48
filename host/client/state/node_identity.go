package state

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// bucketNodeIdentity holds the node secret the servers issued (key
// keyNodeSecret). Created at the first write, so a state DB of an older
// berth reads as "no secret".
var (
	bucketNodeIdentity = []byte("node_identity")
	keyNodeSecret      = []byte("secret")
)

// NodeSecret returns the node secret the servers issued this node, "" when
// none is stored.
func (db *DB) NodeSecret() (string, error) {
	var secret string
	err := db.bolt.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketNodeIdentity); b != nil {
			secret = string(b.Get(keyNodeSecret))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("state db %s: reading the node secret: %w", db.path, err)
	}
	return secret, nil
}

// PutNodeSecret stores the node secret the servers issued this node,
// replacing any earlier one (a node re-admitted is issued a new one).
func (db *DB) PutNodeSecret(secret string) error {
	if secret == "" {
		return fmt.Errorf("state db %s: node secret: %w: empty", db.path, ErrInvalidRecord)
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketNodeIdentity)
		if err != nil {
			return err
		}
		return b.Put(keyNodeSecret, []byte(secret))
	})
	if err != nil {
		return fmt.Errorf("state db %s: storing the node secret: %w", db.path, err)
	}
	return nil
}
