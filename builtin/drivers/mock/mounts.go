package mock

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	"berth.dev/berth/sdk/driverpb"
)

// MountsAttribute is the InspectTask attribute in which a mock task reports
// the mounts it was started with; Mounts decodes it.
const MountsAttribute = "mounts"

// encodeMounts is the MountsAttribute value for mounts: the protojson of a
// TaskConfig holding only them, so every field (the propagation enum
// included) survives exactly and Mounts can decode it without a format of
// its own.
func encodeMounts(mounts []*driverpb.Mount) string {
	b, err := protojson.Marshal(&driverpb.TaskConfig{Mounts: mounts})
	if err != nil {
		// Marshalling a TaskConfig of plain strings, bools and a known
		// enum cannot fail; say so loudly if it ever does.
		return fmt.Sprintf("unencodable mounts: %v", err)
	}
	return string(b)
}

// Mounts returns the mounts a mock task was started with, from its
// InspectTask status, so tests can assert what a driver received.
func Mounts(st *driverpb.TaskStatus) ([]*driverpb.Mount, error) {
	v, ok := st.GetAttributes()[MountsAttribute]
	if !ok {
		return nil, fmt.Errorf("task %q status has no %q attribute", st.GetId(), MountsAttribute)
	}
	var cfg driverpb.TaskConfig
	if err := protojson.Unmarshal([]byte(v), &cfg); err != nil {
		return nil, fmt.Errorf("task %q status: attribute %q: %w", st.GetId(), MountsAttribute, err)
	}
	return cfg.GetMounts(), nil
}
