package ociarchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readTar reads a tar stream into a map of name → contents (directories:
// nil) and modes.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := files[h.Name]; dup {
			t.Fatalf("%s twice in the archive", h.Name)
		}
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeDir {
			files[h.Name] = nil
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// blob reads the blob a descriptor names and checks its digest and size.
func blob(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files[blobPath(d.Digest)]
	if !ok {
		t.Fatalf("no blob %s in the archive", d.Digest)
	}
	if sha(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s size %d, descriptor says %s %d", blobPath(d.Digest), sha(b), len(b), d.Digest, d.Size)
	}
	return b
}

// TestWriteLayout reads an archive back as the image-spec lays it out:
// oci-layout, an index naming the image, a manifest whose config and layer
// blobs match their descriptors, a config whose diff ID is the
// uncompressed layer's digest, and a layer with the files, their modes
// and every parent directory.
func TestWriteLayout(t *testing.T) {
	src := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	img := Image{
		Name: "berth.test/layout:1",
		Files: []File{
			{Path: "/usr/local/bin/prog", Source: src},
			{Path: "/etc/greeting", Data: []byte("hello\n")},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		},
		Entrypoint: []string{"/usr/local/bin/prog"},
		Cmd:        []string{"x"},
		Env:        []string{"A=b"},
		WorkingDir: "/tmp",
	}
	var buf bytes.Buffer
	if err := Write(&buf, img); err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, bytes.NewReader(buf.Bytes()))
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout %q", got)
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index %+v", idx)
	}
	md := idx.Manifests[0]
	if md.MediaType != MediaTypeManifest || md.Annotations[AnnotationRefName] != img.Name || md.Annotations[AnnotationContainerdImageRef] != img.Name ||
		md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture != runtime.GOARCH {
		t.Fatalf("index manifest descriptor %+v", md)
	}
	var man manifest
	if err := json.Unmarshal(blob(t, files, md), &man); err != nil {
		t.Fatal(err)
	}
	if man.SchemaVersion != 2 || man.Config.MediaType != MediaTypeConfig || len(man.Layers) != 1 || man.Layers[0].MediaType != MediaTypeLayer {
		t.Fatalf("manifest %+v", man)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(t, files, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || cfg.RootFS.Type != "layers" ||
		len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != sha(raw) {
		t.Fatalf("config %+v; the layer's diff ID is %s", cfg, sha(raw))
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/usr/local/bin/prog" || strings.Join(cfg.Config.Cmd, " ") != "x" ||
		strings.Join(cfg.Config.Env, " ") != defaultPath+" A=b" || cfg.Config.WorkingDir != "/tmp" {
		t.Fatalf("config's container defaults %+v", cfg.Config)
	}
	layer, modes := readTar(t, bytes.NewReader(raw))
	want := map[string]string{"usr/": "", "usr/local/": "", "usr/local/bin/": "", "usr/local/bin/prog": "#!/bin/sh\necho hi\n",
		"etc/": "", "etc/greeting": "hello\n", "tmp/": ""}
	if len(layer) != len(want) {
		t.Fatalf("layer holds %d entries, want %d: %v", len(layer), len(want), modes)
	}
	for name, content := range want {
		if got, ok := layer[name]; !ok || string(got) != content {
			t.Fatalf("layer entry %s: %q (present %v), want %q", name, got, ok, content)
		}
	}
	for name, mode := range map[string]int64{"usr/local/bin/prog": 0o750, "etc/greeting": 0o644, "tmp/": 0o1777, "usr/": 0o755} {
		if modes[name] != mode {
			t.Fatalf("layer entry %s has mode %o, want %o", name, modes[name], mode)
		}
	}

	// Compressed, the same layer.
	img.Compress = true
	var compressed bytes.Buffer
	if err := Write(&compressed, img); err != nil {
		t.Fatal(err)
	}
	cfiles, _ := readTar(t, bytes.NewReader(compressed.Bytes()))
	var cidx index
	var cman manifest
	if err := json.Unmarshal(cfiles["index.json"], &cidx); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(blob(t, cfiles, cidx.Manifests[0]), &cman); err != nil {
		t.Fatal(err)
	}
	czr, err := gzip.NewReader(bytes.NewReader(blob(t, cfiles, cman.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	craw, err := io.ReadAll(czr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(craw, raw) || cman.Layers[0].Size >= man.Layers[0].Size {
		t.Fatalf("compressed layer: %d bytes (stored %d), its tar equal %v", cman.Layers[0].Size, man.Layers[0].Size, bytes.Equal(craw, raw))
	}
	img.Compress = false

	// The same image again is the same archive.
	var again bytes.Buffer
	if err := Write(&again, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("writing the same image twice gave two archives")
	}
}

func TestWriteRefusesBadImages(t *testing.T) {
	for name, img := range map[string]Image{
		"no name":       {Files: []File{{Path: "/a", Data: []byte("x")}}},
		"relative path": {Name: "x:1", Files: []File{{Path: "a", Data: []byte("x")}}},
		"unclean path":  {Name: "x:1", Files: []File{{Path: "/a/../b", Data: []byte("x")}}},
		"root":          {Name: "x:1", Files: []File{{Path: "/", Mode: fs.ModeDir | 0o755}}},
		"twice":         {Name: "x:1", Files: []File{{Path: "/a", Data: []byte("x")}, {Path: "/a", Data: []byte("y")}}},
		"file as dir":   {Name: "x:1", Files: []File{{Path: "/a", Data: []byte("x")}, {Path: "/a/b", Data: []byte("y")}}},
		"two sources":   {Name: "x:1", Files: []File{{Path: "/a", Data: []byte("x"), Source: "/etc/hostname"}}},
		"missing":       {Name: "x:1", Files: []File{{Path: "/a", Source: filepath.Join(t.TempDir(), "nope")}}},
	} {
		if err := Write(io.Discard, img); err == nil {
			t.Errorf("%s: Write accepted %+v", name, img)
		}
	}
}
