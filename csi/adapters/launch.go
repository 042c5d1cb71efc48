package adapters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"

	"berth.dev/berth/internal/pluginproc"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// socketKind names adapters' socket directories (pluginproc.NewSocketDir).
const socketKind = "csi"

func isConfigError(err error) bool { return errors.Is(err, ErrInvalidConfig) }

// DataDir is the directory the adapter name owns under a client data dir.
func DataDir(clientDataDir, name string) string {
	return filepath.Join(clientDataDir, "csi", "adapters", name)
}

// env is the environment an adapter process gets besides go-plugin's
// socket dir: PATH (a CSI plugin runs mount tools), and sdk.StorageEnv's
// variables.
func (in *instance) env() []string {
	cfg := in.a.Config
	if len(cfg) == 0 {
		cfg = []byte("{}")
	}
	return []string{
		"PATH=" + os.Getenv("PATH"),
		sdk.EnvStorageConfig + "=" + string(cfg),
		sdk.EnvStorageNodeID + "=" + in.m.cfg.NodeID,
		sdk.EnvStorageNodeName + "=" + in.m.cfg.NodeName,
		sdk.EnvStorageDataDir + "=" + DataDir(in.m.cfg.DataDir, in.a.Name),
	}
}

// configDigest identifies what the process was given besides its command
// line, so that a process started with another config is replaced rather
// than reattached. PATH is left out: an agent started from another shell
// does not make its adapters stale.
func (in *instance) configDigest() string {
	h := sha256.New()
	for _, kv := range in.env()[1:] {
		h.Write([]byte(kv))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Prepare implements pluginsup.Plugin: it checks the executable before
// each launch attempt, so that an adapter the operator installs or fixes
// later is picked up, and creates the adapter's data dir.
func (in *instance) Prepare() error {
	if err := noun.CheckExecutable(in.a); err != nil {
		if in.a.Err != nil {
			return in.a.Err // the catalog's description says more
		}
		return err
	}
	if err := os.MkdirAll(DataDir(in.m.cfg.DataDir, in.a.Name), 0o700); err != nil {
		return noun.Wrap(in.a, errcode.Fallback(ErrAdapterStart, fmt.Errorf("adapter data dir: %w", err)))
	}
	return nil
}

// Launch implements pluginsup.Plugin.
func (in *instance) Launch(ctx context.Context, cfg sdk.LaunchConfig) (*sdk.StoragePlugin, error) {
	return sdk.LaunchStorageAdapter(ctx, cfg)
}

// Setup implements pluginsup.Plugin: it checks the adapter's name.
func (in *instance) Setup(_ context.Context, proc *sdk.StoragePlugin) (*grpc.ClientConn, error) {
	if name := proc.Adapter().Name(); name != in.a.Name {
		return nil, noun.Wrap(in.a, fmt.Errorf("%w: it calls itself %q; a plugin_dir/csi executable must be named for the adapter it serves",
			ErrAdapterName, name))
	}
	return proc.Adapter().Conn(), nil
}

// stopStale stops the process of a record whose adapter left the catalog.
func stopStale(m *Manager, rec *pb.StorageAdapterRecord) {
	ra := pluginsup.RecordFromPB(rec, "").Reattach
	ctx, cancel := context.WithTimeout(m.sup.Context(), m.cfg.StartTimeout)
	defer cancel()
	proc, err := sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{Name: rec.GetName(), Reattach: &ra, Logger: m.logger})
	if err == nil {
		proc.Kill()
	}
	pluginproc.RemoveSocketDir(pluginproc.OwnedSocketDir(socketKind, rec.GetName(), ra.Address))
	m.deleteRecord(rec.GetName())
}

// adapterRecords keeps pluginsup's records in the Store.
type adapterRecords struct{ Store }

var _ pluginsup.Records = adapterRecords{}

func (s adapterRecords) PutRecord(name string, r pluginsup.Record) error {
	return s.PutStorageAdapter(&pb.StorageAdapterRecord{
		Name: name, Path: r.Path, Args: r.Args,
		ConfigDigest: r.ConfigDigest,
		Reattach:     pluginsup.ReattachToPB(r.Reattach),
		LaunchedAt:   r.LaunchedAt.UnixNano(),
		BerthVersion: r.BerthVersion,
	})
}

func (s adapterRecords) DeleteRecord(name string) error { return s.DeleteStorageAdapter(name) }
