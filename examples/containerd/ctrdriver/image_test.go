package ctrdriver_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// testImage is the reference the test image archive names.
const testImage = "berth.test/taskprog:1"

var (
	// testLayer and testDiffID are the test image's layer, for tests
	// writing archives of their own around it.
	testLayer   []byte
	testDiffID  string
	archiveOnce sync.Once
	archiveDir  string
	archivePath string
	archiveErr  error
)

// imageArchive returns the path of an OCI image archive holding testImage:
// one layer with a statically built internal/taskprog as /taskprog (the
// entrypoint), /etc/passwd and /etc/group with root and nobody, and /tmp.
// It is built once per test binary; no registry is involved.
func imageArchive(t testing.TB) string {
	t.Helper()
	archiveOnce.Do(func() { archivePath, archiveErr = buildArchive() })
	if archiveErr != nil {
		t.Fatalf("build the test image archive: %v", archiveErr)
	}
	return archivePath
}

// removeArchive removes what imageArchive built; TestMain calls it.
func removeArchive() {
	if archiveDir != "" {
		os.RemoveAll(archiveDir)
	}
}

func buildArchive() (string, error) {
	dir, err := os.MkdirTemp("", "berth-ctrd-image-")
	if err != nil {
		return "", err
	}
	archiveDir = dir
	prog := filepath.Join(dir, "taskprog")
	build := exec.Command("go", "build", "-trimpath", "-o", prog, "../internal/taskprog")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", &buildError{err, out}
	}
	progBytes, err := os.ReadFile(prog)
	if err != nil {
		return "", err
	}
	layer, diffID, err := layerTarGz([]tarEntry{
		{name: "etc/", dir: true},
		{name: "etc/passwd", data: []byte("root:x:0:0:root:/root:/taskprog\nnobody:x:65534:65534:nobody:/nonexistent:/taskprog\n")},
		{name: "etc/group", data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{name: "tmp/", dir: true},
		{name: "taskprog", data: progBytes, mode: 0o755},
	})
	if err != nil {
		return "", err
	}
	testLayer, testDiffID = layer, diffID
	out := filepath.Join(dir, "taskprog.oci.tar")
	return out, writeOCIArchive(out, testImage, layer, diffID, []string{"/taskprog"}, []string{"run"})
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build taskprog: " + e.err.Error() + "\n" + string(e.out)
}

type tarEntry struct {
	name string
	data []byte
	mode int64
	dir  bool
}

// layerTarGz returns a gzipped layer tar and its diff ID (the digest of
// the uncompressed tar).
func layerTarGz(entries []tarEntry) (gz []byte, diffID string, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}
		if e.mode != 0 {
			h.Mode = e.mode
		}
		if e.dir {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
			if e.name == "tmp/" {
				h.Mode = 0o1777
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return zipped.Bytes(), digest(raw.Bytes()), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// The archive writers below repeat part of berth's internal/ociarchive:
// this module imports nothing of berth but the sdk (see containerd_test.go).

// writeOCIArchive writes an OCI image layout as a tar: oci-layout,
// index.json naming ref, and the manifest, config and layer blobs.
func writeOCIArchive(path, ref string, layer []byte, diffID string, entrypoint, cmd []string) error {
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint, "Cmd": cmd, "Env": []string{"PATH=/usr/bin:/bin"}, "WorkingDir": "/"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: len(config)},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: digest(layer), Size: len(layer)}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: len(manifest),
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref},
		}},
	})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(b []byte) string { return "blobs/sha256/" + digest(b)[len("sha256:"):] }
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(manifest), manifest},
		{blob(config), config},
		{blob(layer), layer},
	} {
		if err := add(e.name, e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// writeDockerArchive writes a `docker save` archive (manifest.json,
// repositories, the config and an uncompressed layer) holding ref.
func writeDockerArchive(path, ref string, layerGz []byte, diffID string, entrypoint, cmd []string) error {
	zr, err := gzip.NewReader(bytes.NewReader(layerGz))
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	if _, err := layer.ReadFrom(zr); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint, "Cmd": cmd, "Env": []string{"PATH=/usr/bin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	configName := digest(config)[len("sha256:"):] + ".json"
	layerName := diffID[len("sha256:"):] + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {configName, config}, {layerName, layer.Bytes()}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
