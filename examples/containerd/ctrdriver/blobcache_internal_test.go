package ctrdriver

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// countingStore is a content store of blobs in memory that counts the
// readers it opens.
type countingStore struct {
	content.Store // nil: only ReaderAt is called
	blobs         map[digest.Digest][]byte
	// namespace, if set, is the only namespace holding the blobs
	namespace string
	opened    int
}

func (s *countingStore) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	s.opened++
	ns, _ := namespaces.Namespace(ctx)
	b, ok := s.blobs[desc.Digest]
	if s.namespace != "" && ns != s.namespace {
		ok = false
	}
	if !ok {
		return nil, io.ErrUnexpectedEOF
	}
	return bytesReaderAt{bytes.NewReader(b)}, nil
}

func read(t *testing.T, p content.Provider, dg digest.Digest) ([]byte, error) {
	t.Helper()
	return readIn(t, "berth", p, dg)
}

func readIn(t *testing.T, ns string, p content.Provider, dg digest.Digest) ([]byte, error) {
	t.Helper()
	return content.ReadBlob(namespaces.WithNamespace(context.Background(), ns), p, ocispec.Descriptor{Digest: dg})
}

// TestBlobCacheKeepsNamespacesApart: a blob read in one namespace is not
// served in another that does not hold it.
func TestBlobCacheKeepsNamespacesApart(t *testing.T) {
	b := []byte(`{"schemaVersion":2}`)
	store := &countingStore{blobs: map[digest.Digest][]byte{digest.FromBytes(b): b}, namespace: "berth"}
	c := newBlobCache(store)
	if _, err := readIn(t, "berth", c, digest.FromBytes(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := readIn(t, "other", c, digest.FromBytes(b)); err == nil {
		t.Error("a blob of namespace berth was served in namespace other")
	}
}

// TestBlobCacheServesSmallBlobsOnce: a small blob is read from the store
// once, then from memory, the same bytes; a blob over the size limit and
// a blob whose bytes do not match its digest are read from the store each
// time, the latter refused.
func TestBlobCacheServesSmallBlobsOnce(t *testing.T) {
	small := []byte(`{"schemaVersion":2}`)
	big := bytes.Repeat([]byte("x"), blobCacheMaxSize+1)
	liar := digest.FromString("something else")
	store := &countingStore{blobs: map[digest.Digest][]byte{
		digest.FromBytes(small): small, digest.FromBytes(big): big, liar: []byte("not it"),
	}}
	c := newBlobCache(store)
	for range 3 {
		got, err := read(t, c, digest.FromBytes(small))
		if err != nil || !bytes.Equal(got, small) {
			t.Fatalf("small blob: %q, %v", got, err)
		}
	}
	if store.opened != 1 {
		t.Errorf("small blob read from the store %d times, want 1", store.opened)
	}
	store.opened = 0
	for range 2 {
		if got, err := read(t, c, digest.FromBytes(big)); err != nil || len(got) != len(big) {
			t.Fatalf("big blob: %d bytes, %v", len(got), err)
		}
	}
	if store.opened != 2 {
		t.Errorf("big blob read from the store %d times, want 2 (never kept)", store.opened)
	}
	store.opened = 0
	for range 2 {
		if _, err := read(t, c, liar); err == nil || !strings.Contains(err.Error(), "does not match its digest") {
			t.Errorf("blob not matching its digest: %v", err)
		}
	}
	if store.opened != 2 {
		t.Errorf("mismatched blob read from the store %d times, want 2 (never kept)", store.opened)
	}
	if _, err := read(t, c, digest.FromString("absent")); err == nil {
		t.Error("absent blob: no error")
	}
}

// TestBlobCacheIsBounded: past blobCacheMaxBytes the cache starts afresh,
// so it never holds more.
func TestBlobCacheIsBounded(t *testing.T) {
	store := &countingStore{blobs: map[digest.Digest][]byte{}}
	c := newBlobCache(store)
	var first digest.Digest
	for i := range blobCacheMaxBytes/blobCacheMaxSize + 2 {
		b := bytes.Repeat([]byte{byte(i)}, blobCacheMaxSize)
		dg := digest.FromBytes(b)
		store.blobs[dg] = b
		if i == 0 {
			first = dg
		}
		if _, err := read(t, c, dg); err != nil {
			t.Fatal(err)
		}
		if c.bytes > blobCacheMaxBytes {
			t.Fatalf("cache holds %d bytes, limit %d", c.bytes, blobCacheMaxBytes)
		}
	}
	store.opened = 0
	if _, err := read(t, c, first); err != nil || store.opened != 1 {
		t.Errorf("the first blob after the cache started afresh: %v, read from the store %d times, want 1", err, store.opened)
	}
}
