package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"berth.dev/berth/internal/atomicfile"
	"berth.dev/berth/internal/uuid"
)

// LoadNodeID returns the node ID the client on dataDir has or will have,
// creating it on first start: the agent tells it to storage adapters it
// starts before the client.
func LoadNodeID(dataDir string) (string, error) { return loadNodeID(dataDir) }

// loadNodeID returns the node ID stored in dataDir, creating it on first
// start. The ID is the node's identity across restarts: a node that comes
// back with the same ID gets its allocations and claims back.
func loadNodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "client", "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !uuid.Valid(id) {
			return "", fmt.Errorf("node id file %s holds %q, not a valid id (delete it to make a new node)", path, id)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("reading node id: %w", err)
	}
	id := uuid.Generate()
	if err := atomicfile.Write(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("writing node id: %w", err)
	}
	return id, nil
}
