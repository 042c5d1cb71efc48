package client

import (
	"fmt"

	"berth.dev/berth/rpc"
)

// NodeSecretStore keeps the node secret the client makes before the node's
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
	var secret string
	if c.cfg.Identity != nil {
		var err error
		if secret, err = c.cfg.Identity.NodeSecret(); err != nil {
			return fmt.Errorf("node %s: %w", c.nodeID, err)
		}
	}
	if secret != "" {
		c.secret.Store(&secret)
		return nil
	}
	// None yet: make one and store it before the first registration
	// presents it. The servers adopt it for a node without a secret, so
	// a registration whose answer is lost is retried with the same one.
	secret, err := rpc.NewNodeSecret()
	if err != nil {
		return fmt.Errorf("node %s: %w", c.nodeID, err)
	}
	c.keepNodeSecret(secret)
	return nil
}

// nodeSecret is the secret every call to the servers carries ("" before
// none is made).
func (c *Client) nodeSecret() string {
	if p := c.secret.Load(); p != nil {
		return *p
	}
	return ""
}

// keepNodeSecret adopts a secret (made here, or by the servers): stored first, so
// a restart presents it, then sent with every call. A failed store is
// logged and the secret still used: the node keeps working until it
// restarts, when it would be refused and need `berth node readmit`.
func (c *Client) keepNodeSecret(secret string) {
	if secret == "" {
		return
	}
	if c.cfg.Identity != nil {
		if err := c.cfg.Identity.PutNodeSecret(secret); err != nil {
			c.logger.Error("storing the node secret failed; after a restart this node is refused until `berth node readmit` clears it",
				"node_id", c.nodeID, "error", err)
		}
	}
	c.secret.Store(&secret)
	c.logger.Debug("node secret stored", "node_id", c.nodeID)
}
