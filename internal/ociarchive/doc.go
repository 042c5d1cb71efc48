// Package ociarchive writes OCI image archives for tests: a tar of an OCI
// image layout (oci-layout, index.json, blobs/sha256/…) holding one linux
// image of the machine's architecture, made of one gzip layer (deflated
// only when asked: see Image.Compress) built from files on disk.
// containerd imports such an archive (`ctr images import`, the containerd
// driver's `load`), so tests run containers of binaries they built without
// a registry.
//
// The index names the image twice: io.containerd.image.name (containerd's
// import reads it first) and org.opencontainers.image.ref.name, both the
// full reference, so the image is stored under the name a task's `image`
// asks for.
//
// Executable adds a binary with what it needs to run in an otherwise empty
// root: a static ELF file alone, a dynamic one with its program
// interpreter and shared libraries, found with ldd and stored at the paths
// this machine has them (contents copied, symlinks followed).
//
// The archive is deterministic: entries sorted, times zero, owner root, so
// the same files give the same digests.
package ociarchive
