package ociarchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Media types and annotations of the OCI image spec (image-spec v1.1) and
// containerd's image name annotation.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	AnnotationRefName            = "org.opencontainers.image.ref.name"
	AnnotationContainerdImageRef = "io.containerd.image.name"
)

// Image is what an archive holds.
type Image struct {
	// Name is the image's full reference ("berth.test/hostpath:1").
	Name  string
	Files []File
	// The image config's defaults for a container: what runs, its
	// environment (PATH is set when Env does not set it) and directory.
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// Compress deflates the layer. Without it the layer is still a gzip
	// stream (the layer media type is tar+gzip) but of stored blocks:
	// compressing a 40 MB binary takes seconds, several under the race
	// detector, for an archive a test reads once on the same machine.
	Compress bool
}

// File is one entry of the layer.
type File struct {
	// Path is where the image has it: absolute, clean.
	Path string
	// Source is the file on disk whose contents it gets (symlinks
	// followed); empty for Data, or for a directory (Mode's fs.ModeDir).
	Source string
	Data   []byte
	// Mode is its permission bits and, for a directory, fs.ModeDir; zero
	// takes Source's mode, or 0644 for Data.
	Mode fs.FileMode
}

// errBadImage is what Write's errors about the image as given wrap: no
// name, a relative or repeated path, a file with two sources.
var errBadImage = errors.New("bad image")

// WriteFile writes img's archive to the file at name.
func WriteFile(name string, img Image) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := Write(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		Env        []string `json:"Env,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// defaultPath is the PATH of an image whose Env sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Write writes img's archive to w.
func Write(w io.Writer, img Image) error {
	if img.Name == "" {
		return fmt.Errorf("%w: no name", errBadImage)
	}
	level := gzip.NoCompression
	if img.Compress {
		level = gzip.BestSpeed
	}
	layer, diffID, err := buildLayer(img.Files, level)
	if err != nil {
		return err
	}
	var cfg imageConfig
	cfg.Architecture, cfg.OS = runtime.GOARCH, "linux"
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.WorkingDir = img.Entrypoint, img.Cmd, img.WorkingDir
	cfg.Config.Env = img.Env
	if !slices.ContainsFunc(img.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		cfg.Config.Env = append([]string{defaultPath}, img.Env...)
	}
	cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{diffID}
	cfgBlob, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	man := manifest{SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: describe(MediaTypeConfig, cfgBlob),
		Layers: []descriptor{describe(MediaTypeLayer, layer)}}
	manBlob, err := json.Marshal(man)
	if err != nil {
		return err
	}
	manDesc := describe(MediaTypeManifest, manBlob)
	manDesc.Annotations = map[string]string{AnnotationRefName: img.Name, AnnotationContainerdImageRef: img.Name}
	manDesc.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
	idxBlob, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []descriptor{manDesc}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxBlob},
		{blobPath(manDesc.Digest), manBlob},
		{blobPath(man.Config.Digest), cfgBlob},
		{blobPath(man.Layers[0].Digest), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func describe(mediaType string, blob []byte) descriptor {
	return descriptor{MediaType: mediaType, Digest: digest(blob), Size: int64(len(blob))}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// buildLayer is the tar of files, with every parent directory, in a gzip
// stream of the given level, and the digest of the uncompressed tar (the
// config's diff ID).
func buildLayer(files []File, level int) (layer []byte, diffID string, err error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, "", fmt.Errorf("%w: file path %q: want an absolute, clean path below /", errBadImage, f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, "", fmt.Errorf("%w: %s given twice", errBadImage, f.Path)
		}
		if f.Source != "" && f.Data != nil {
			return nil, "", fmt.Errorf("%w: %s has both a source file and data", errBadImage, f.Path)
		}
		byPath[f.Path] = f
	}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if p, ok := byPath[d]; ok {
				if !p.Mode.IsDir() {
					return nil, "", fmt.Errorf("%w: %s is a file and the directory of %s", errBadImage, d, f.Path)
				}
				continue
			}
			byPath[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)

	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, level)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(zw, sum))
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p]); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

func writeEntry(tw *tar.Writer, f File) error {
	name := strings.TrimPrefix(f.Path, "/")
	hdr := &tar.Header{Name: name, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if f.Mode.IsDir() {
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", int64(f.Mode.Perm())
		if f.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	mode := f.Mode.Perm()
	if f.Source == "" {
		if mode == 0 {
			mode = 0o644
		}
		hdr.Mode, hdr.Size = int64(mode), int64(len(f.Data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(f.Data)
		return err
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("image file %s: %w", f.Path, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("image file %s: %w", f.Path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: image file %s: source %s is not a regular file", errBadImage, f.Path, f.Source)
	}
	if mode == 0 {
		mode = st.Mode().Perm()
	}
	hdr.Mode, hdr.Size = int64(mode), st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if n, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("image file %s: copying %s: %w", f.Path, f.Source, err)
	} else if n != st.Size() {
		return fmt.Errorf("image file %s: %s changed size while copied", f.Path, f.Source)
	}
	return nil
}
