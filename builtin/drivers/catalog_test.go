package drivers

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
)

func TestCatalog(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"exec", "mock", "raw_exec"}) {
		t.Fatalf("Names() = %v, want [exec mock raw_exec]", got)
	}
	for _, b := range All() {
		info, err := b.New(nil).PluginInfo(context.Background())
		if err != nil || info.GetName() != b.Name {
			t.Errorf("driver listed as %q reports %v, %v", b.Name, info, err)
		}
		if b.DevOnly != (b.Name == "mock") {
			t.Errorf("%s DevOnly = %v; only mock is dev-only", b.Name, b.DevOnly)
		}
		schemas, err := b.New(nil).ConfigSchema(context.Background())
		if err != nil || !proto.Equal(schemas.GetTask(), b.TaskSchema) || b.TaskSchema == nil {
			t.Errorf("%s: the catalog's task schema differs from the driver's (%v)", b.Name, err)
		}
		if _, ok := Builtins()[b.Name]; !ok {
			t.Errorf("Builtins() lacks %s", b.Name)
		}
	}
	if got := Args("raw_exec"); !slices.Equal(got, []string{"builtin", "driver", "raw_exec"}) {
		t.Errorf("Args = %v", got)
	}
}

func TestServeRefusals(t *testing.T) {
	if err := Serve("nope"); err == nil {
		t.Error("Serve of an unknown driver succeeded")
	}
	t.Setenv(sdk.Handshake.MagicCookieKey, "")
	if err := Serve("mock"); !errors.Is(err, sdk.ErrNotPluginProcess) {
		t.Errorf("Serve outside a plugin process = %v, want ErrNotPluginProcess", err)
	}
	// Not a driver command line: returns instead of serving.
	MainIfRequested([]string{"berth", "run", "-dev"})
	MainIfRequested([]string{"berth", "builtin", "driver"})
}
