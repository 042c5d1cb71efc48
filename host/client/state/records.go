package state

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// RecordError is a record that could not be decoded, naming where it is.
type RecordError struct {
	Bucket string
	Key    string
	Err    error
}

// Error implements error.
func (e *RecordError) Error() string {
	return fmt.Sprintf("state db: bucket %s, key %q: %v", e.Bucket, e.Key, e.Err)
}

// Unwrap returns the decoding error.
func (e *RecordError) Unwrap() error { return e.Err }

// put stores msg under key in bucket.
func (db *DB) put(bucket []byte, key string, msg proto.Message) error {
	data, err := proto.Marshal(msg)
	if err != nil {
		return fmt.Errorf("state db: encode %s %q: %w", bucket, key, err)
	}
	return db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(key), data)
	})
}

// del removes key from bucket; a missing key is not an error.
func (db *DB) del(bucket []byte, key string) error {
	return db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(key))
	})
}

// list decodes every record of bucket, in key order. Records that do not
// decode are left out and reported as joined *RecordError values.
func list[T proto.Message](db *DB, bucket []byte, newT func() T) ([]T, error) {
	var out []T
	var errs []error
	err := db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			msg, err := decode(bucket, k, v, newT)
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			out = append(out, msg)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("state db: read %s: %w", bucket, err)
	}
	return out, errors.Join(errs...)
}

// get decodes the record under key, or returns ok=false when there is none.
func get[T proto.Message](db *DB, bucket []byte, key string, newT func() T) (T, bool, error) {
	var out T
	var found bool
	err := db.bolt.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return nil
		}
		msg, err := decode(bucket, []byte(key), v, newT)
		if err != nil {
			return err
		}
		out, found = msg, true
		return nil
	})
	return out, found, err
}

// decode unmarshals one stored value; bytes from bbolt are only valid in
// their transaction, and proto.Unmarshal copies what it keeps.
func decode[T proto.Message](bucket, key, value []byte, newT func() T) (T, error) {
	msg := newT()
	if err := proto.Unmarshal(value, msg); err != nil {
		var zero T
		return zero, &RecordError{Bucket: string(bucket), Key: string(key), Err: err}
	}
	return msg, nil
}
