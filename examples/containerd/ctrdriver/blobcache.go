package ctrdriver

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Every StartTask resolves its image's manifest and config several times:
// to check it is unpacked, to build the spec from the image config, and to
// find the snapshot to prepare from the layers' diff IDs. Through
// containerd's content service each read is two round trips (Info, then
// Read), some fifteen per start. Content is addressed by digest, so a
// blob read once is the same bytes forever: blobCache keeps the small
// ones (manifests, indexes, configs) the driver reads, and serves them
// without asking containerd again (per namespace, as containerd keeps
// content).
const (
	// blobCacheMaxSize is the largest blob kept: image configs and
	// manifests are a few KiB; layers are never kept.
	blobCacheMaxSize = 256 << 10
	// blobCacheMaxBytes bounds the cache; when a blob would pass it, the
	// cache starts afresh.
	blobCacheMaxBytes = 16 << 20
)

// blobCache is a content.Store that keeps small blobs it read, checked
// against their digest; everything else goes to the store it wraps.
type blobCache struct {
	content.Store

	mu    sync.Mutex
	blobs map[blobKey][]byte
	bytes int
}

// blobKey names a blob in a containerd namespace: content is per
// namespace, and a blob one namespace holds is not served to another.
type blobKey struct {
	namespace string
	digest    digest.Digest
}

func newBlobCache(s content.Store) *blobCache {
	return &blobCache{Store: s, blobs: map[blobKey][]byte{}}
}

// ReaderAt implements content.Provider.
func (c *blobCache) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	ns, _ := namespaces.Namespace(ctx)
	key := blobKey{ns, desc.Digest}
	c.mu.Lock()
	b, ok := c.blobs[key]
	c.mu.Unlock()
	if ok {
		return bytesReaderAt{bytes.NewReader(b)}, nil
	}
	ra, err := c.Store.ReaderAt(ctx, desc)
	if err != nil || ra.Size() > blobCacheMaxSize || desc.Digest.Validate() != nil {
		return ra, err
	}
	b = make([]byte, ra.Size())
	n, err := ra.ReadAt(b, 0)
	ra.Close()
	if err != nil && n != len(b) {
		return nil, fmt.Errorf("read blob %s: %w", desc.Digest, err)
	}
	if desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
		return nil, fmt.Errorf("blob %s: content does not match its digest", desc.Digest)
	}
	c.mu.Lock()
	if c.bytes+len(b) > blobCacheMaxBytes {
		c.blobs, c.bytes = map[blobKey][]byte{}, 0
	}
	if _, dup := c.blobs[key]; !dup {
		c.blobs[key] = b
		c.bytes += len(b)
	}
	c.mu.Unlock()
	return bytesReaderAt{bytes.NewReader(b)}, nil
}

// bytesReaderAt is a content.ReaderAt over a blob in memory.
type bytesReaderAt struct{ *bytes.Reader }

func (bytesReaderAt) Close() error { return nil }
