package ctrdriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"berth.dev/berth/sdk"
)

// normalizeRef turns an image reference into containerd's full form
// (alpine → docker.io/library/alpine:latest).
func normalizeRef(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: "image",
			Problem: fmt.Sprintf("%q is not an image reference: %v", ref, err)}
	}
	return named.String(), nil
}

// ensureImage makes the task's image present and unpacked: the archive of
// load imported first when given, then pulled when still missing. Progress
// goes out as task events.
func (d *Driver) ensureImage(ctx context.Context, c *client.Client, pc pluginConfig, taskID string, tc *taskConfig) (client.Image, error) {
	ref, err := normalizeRef(tc.image)
	if err != nil {
		return nil, err
	}
	if tc.load != "" {
		if err := d.load(ctx, c, taskID, tc.load, ref); err != nil {
			return nil, err
		}
	}
	img, err := c.GetImage(ctx, ref)
	switch {
	case errdefs.IsNotFound(err) && tc.load != "":
		return nil, &sdk.StartError{Reason: sdk.StartNotFound, Path: tc.load,
			Detail: fmt.Sprintf("image archive holds no image %s", ref)}
	case errdefs.IsNotFound(err):
		img, err = d.pull(ctx, c, pc, taskID, ref)
		if err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("look up image %s: %w", ref, err)
	}
	unpacked, err := img.IsUnpacked(ctx, pc.snapshotter)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	if !unpacked {
		d.events.Emit(taskID, fmt.Sprintf("Unpacking image %s", ref), nil)
		if err := img.Unpack(ctx, pc.snapshotter); err != nil {
			return nil, &sdk.StartError{Reason: sdk.StartOther, Path: ref, Detail: fmt.Sprintf("unpack image into snapshotter %s: %v", pc.snapshotter, err)}
		}
	}
	return img, nil
}

// load imports an image archive (OCI layout or docker save). An archive
// holding exactly one image that is not named ref is tagged ref, so a
// job may name an archive's image as it likes.
//
// Loads of one archive are serialized, and an archive whose size, mtime
// and inode are those of its last load is not imported again while ref
// still names an image: containerd would ingest the same blobs again.
func (d *Driver) load(ctx context.Context, c *client.Client, taskID, path, ref string) error {
	unlock := d.archives.lock(path)
	defer unlock()
	if fi, err := os.Stat(path); err == nil && d.archives.loaded(path, fi, ref) {
		if _, err := c.GetImage(ctx, ref); err == nil {
			return nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		reason := sdk.StartOther
		if errors.Is(err, os.ErrNotExist) {
			reason = sdk.StartNotFound
		} else if errors.Is(err, os.ErrPermission) {
			reason = sdk.StartPermissionDenied
		}
		return &sdk.StartError{Reason: reason, Path: path, Detail: "image archive: " + err.Error()}
	}
	defer f.Close()
	begin := time.Now()
	imgs, err := c.Import(ctx, f)
	if err != nil {
		return &sdk.StartError{Reason: sdk.StartOther, Path: path, Detail: "import image archive: " + err.Error()}
	}
	names := make([]string, len(imgs))
	found := false
	for i, img := range imgs {
		names[i] = img.Name
		found = found || img.Name == ref
	}
	if !found && len(imgs) == 1 {
		is := c.ImageService()
		tagged := images.Image{Name: ref, Target: imgs[0].Target}
		if _, err := is.Create(ctx, tagged); errdefs.IsAlreadyExists(err) {
			// The name is taken, maybe by another job's image: an archive
			// that does not itself name it must not replace it for every
			// task of the namespace.
			existing, gerr := is.Get(ctx, ref)
			if gerr != nil {
				return fmt.Errorf("tag image %s as %s: %w", imgs[0].Name, ref, gerr)
			}
			if existing.Target.Digest != imgs[0].Target.Digest {
				return &sdk.StartError{Reason: sdk.StartOther, Path: path, Detail: fmt.Sprintf(
					"the archive holds %s, not %s, and %s already names another image (%s) on this node: name the image %s in the archive, or use image = %q",
					imgs[0].Name, ref, ref, existing.Target.Digest, ref, imgs[0].Name)}
			}
		} else if err != nil {
			return fmt.Errorf("tag image %s as %s: %w", imgs[0].Name, ref, err)
		}
		names = append(names, ref)
	}
	if fi, err := f.Stat(); err == nil {
		d.archives.record(path, fi, names)
	}
	d.events.Emit(taskID, fmt.Sprintf("Loaded image archive %s in %s: %s", path, time.Since(begin).Round(time.Millisecond), strings.Join(names, ", ")),
		map[string]string{"image_archive": path})
	return nil
}

// archiveLoads remembers which archives were imported, and serializes
// the imports of each.
type archiveLoads struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
	done  map[string]archiveLoad
}

type archiveLoad struct {
	size    int64
	modTime time.Time
	ino     uint64
	names   []string
}

func (a *archiveLoads) lock(path string) (unlock func()) {
	a.mu.Lock()
	if a.locks == nil {
		a.locks = map[string]*sync.Mutex{}
	}
	l, ok := a.locks[path]
	if !ok {
		l = &sync.Mutex{}
		a.locks[path] = l
	}
	a.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// loaded reports whether the archive at path, as fi describes it, was
// imported and gave the image ref.
func (a *archiveLoads) loaded(path string, fi os.FileInfo, ref string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.done[path]
	return ok && l.size == fi.Size() && l.modTime.Equal(fi.ModTime()) && l.ino == inode(fi) && slices.Contains(l.names, ref)
}

func (a *archiveLoads) record(path string, fi os.FileInfo, names []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = map[string]archiveLoad{}
	}
	a.done[path] = archiveLoad{size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi), names: names}
}

// pull fetches ref from its registry and unpacks it, with a task event
// when it starts, one per layer it downloads, and one when it is done or
// failed.
func (d *Driver) pull(ctx context.Context, c *client.Client, pc pluginConfig, taskID, ref string) (client.Image, error) {
	d.events.Emit(taskID, "Pulling image "+ref, map[string]string{"image": ref})
	begin := time.Now()
	var layers atomic.Int64
	var bytes atomic.Int64
	progress := images.HandlerFunc(func(_ context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if images.IsLayerType(desc.MediaType) {
			n := layers.Add(1)
			total := bytes.Add(desc.Size)
			d.events.Emit(taskID, fmt.Sprintf("Pulling image %s: layer %d (%s, %s; %s so far)", ref, n, shortDigest(desc.Digest.String()), humanBytes(desc.Size), humanBytes(total)),
				map[string]string{"image": ref, "layer": desc.Digest.String()})
		}
		return nil, nil
	})
	img, err := c.Pull(ctx, ref, client.WithPullUnpack, client.WithPullSnapshotter(pc.snapshotter), client.WithImageHandler(progress))
	if err != nil {
		d.events.Emit(taskID, fmt.Sprintf("Pulling image %s failed: %v", ref, err), map[string]string{"image": ref})
		reason := sdk.StartOther
		if errdefs.IsNotFound(err) {
			reason = sdk.StartNotFound
		}
		return nil, &sdk.StartError{Reason: reason, Path: ref, Detail: fmt.Sprintf("pull image (not present in containerd namespace %q): %v", pc.namespace, err)}
	}
	d.events.Emit(taskID, fmt.Sprintf("Pulled image %s in %s (%d layers, %s)", ref, time.Since(begin).Round(time.Millisecond), layers.Load(), humanBytes(bytes.Load())),
		map[string]string{"image": ref})
	return img, nil
}

func shortDigest(dg string) string {
	if _, hex, ok := strings.Cut(dg, ":"); ok && len(hex) > 12 {
		return hex[:12]
	}
	return dg
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
