package sdk

import (
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/sdk/driverpb"
)

func TestServeDriverRefusesToRunByHand(t *testing.T) {
	t.Setenv(Handshake.MagicCookieKey, "")
	if err := ServeDriver(newFakeDriver()); !errors.Is(err, ErrNotPluginProcess) {
		t.Errorf("ServeDriver without the handshake cookie = %v, want ErrNotPluginProcess", err)
	}
}

func TestServeDriverRejectsBadSchema(t *testing.T) {
	t.Setenv(Handshake.MagicCookieKey, Handshake.MagicCookieValue)
	f := newFakeDriver()
	f.schemas = &driverpb.ConfigSchemas{Task: &driverpb.Schema{Fields: []*driverpb.Field{{Name: "x"}}}}
	err := ServeDriver(f)
	if err == nil || !strings.Contains(err.Error(), "task config schema") {
		t.Errorf("ServeDriver with an untyped field = %v, want a task config schema error", err)
	}
}
