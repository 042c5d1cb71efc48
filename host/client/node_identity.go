package client

import (
	"fmt"
)

// NodeSecretStore keeps the node secret the servers issue at the node's
// first registration (the client state DB, state.DB): a client that
// restarts presents it again; one that lost it is refused until an
// operator re-admits the node (`berth node readmit`).
type NodeSecretStore interface {
	NodeSecret() (string, error)
	PutNodeSecret(secret string) error
}

// loadNodeSecret reads the stored secret into the client: from
// Config.Identity, else the state DB of Config.State; without either the
// secret lives as long as the process.
func (c *Client) loadNodeSecret() error {
	if c.cfg.Identity == nil {
		// The state DB keeps it when the client has one (Config.State).
		if st, ok := c.cfg.State.(NodeSecretStore); ok && c.cfg.State != nil {
			c.cfg.Identity = st
		}
	}
	if c.cfg.Identity == nil {
		return nil
	}
	secret, err := c.cfg.Identity.NodeSecret()
	if err != nil {
		return fmt.Errorf("node %s: %w", c.nodeID, err)
	}
	c.secret.Store(&secret)
	return nil
}

// nodeSecret is the secret every call to the servers carries ("" before
// the servers issued one).
func (c *Client) nodeSecret() string {
	if p := c.secret.Load(); p != nil {
		return *p
	}
	return ""
}

// keepNodeSecret adopts a secret a registration issued: stored first, so
// a restart presents it, then sent with every call. A failed store is
// logged and the secret still used: the node keeps working until it
// restarts, when it would be refused and need `berth node readmit`.
func (c *Client) keepNodeSecret(secret string) {
	if secret == "" {
		return
	}
	if c.cfg.Identity != nil {
		if err := c.cfg.Identity.PutNodeSecret(secret); err != nil {
			c.logger.Error("storing the node secret the servers issued failed; after a restart this node is refused until `berth node readmit` clears it",
				"node_id", c.nodeID, "error", err)
		}
	}
	c.secret.Store(&secret)
	c.logger.Info("node secret issued and stored", "node_id", c.nodeID)
}
