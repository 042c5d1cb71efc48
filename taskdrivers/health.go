package taskdrivers

import (
	"errors"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// baseInfo is what a driver's DriverInfo says whatever its health.
func (in *instance) baseInfo() *pb.DriverInfo {
	info := &pb.DriverInfo{Name: in.p.Name, Builtin: in.p.Builtin}
	if !in.p.Builtin {
		info.Path = in.p.Path
	}
	return info
}

// driverInfo returns a copy of the driver's current DriverInfo.
func (in *instance) driverInfo() *pb.DriverInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	return cloneInfo(in.info)
}

// update applies fn to a copy of the DriverInfo and, if that changed
// anything, stamps it, stores it and tells the manager's watcher.
func (in *instance) update(fn func(*pb.DriverInfo)) {
	in.mu.Lock()
	next := cloneInfo(in.info)
	fn(next)
	next.UpdatedAt = in.info.GetUpdatedAt()
	changed := !proto.Equal(next, in.info)
	if changed {
		next.UpdatedAt = time.Now().UnixNano()
		in.info = next
	}
	in.mu.Unlock()
	if changed {
		if in.m.observe != nil {
			in.m.observe(cloneInfo(next))
		}
		in.m.notify()
	}
}

// setDown reports the driver as unusable because of err, described by desc.
// A plugin that is not there is also not detected.
func (in *instance) setDown(err error, desc string) {
	absent := errors.Is(err, ErrPluginMissing) || errors.Is(err, ErrPluginNotExecutable)
	in.update(func(i *pb.DriverInfo) {
		i.Detected = !absent
		i.Healthy = false
		i.HealthDescription = desc
		i.Attributes = nil
	})
}

// setUnhealthy reports a running plugin whose fingerprint cannot be read.
func (in *instance) setUnhealthy(desc string) {
	in.update(func(i *pb.DriverInfo) {
		i.Detected = true
		i.Healthy = false
		i.HealthDescription = desc
	})
}

// applyFingerprint turns a fingerprint of r into the DriverInfo.
func (in *instance) applyFingerprint(r *running, fp *driverpb.DriverFingerprint) {
	in.update(func(i *pb.DriverInfo) {
		i.Version = r.Val.version
		i.Attributes = maps.Clone(fp.GetAttributes())
		// The task schema goes to the servers so a job's config block is
		// checked when it is registered, not when its task fails to start.
		i.TaskSchema = r.Val.schemas.GetTask()
		i.MountVolumes = sdk.MountsSupported(r.Val.client.APIVersion(), r.Val.caps)
		i.HealthDescription = fp.GetHealthDescription()
		switch fp.GetHealth() {
		case driverpb.Health_HEALTH_HEALTHY:
			i.Detected, i.Healthy = true, true
		case driverpb.Health_HEALTH_UNHEALTHY:
			i.Detected, i.Healthy = true, false
		case driverpb.Health_HEALTH_UNDETECTED:
			i.Detected, i.Healthy = false, false
		default:
			i.Detected, i.Healthy = true, false
			if i.HealthDescription == "" {
				i.HealthDescription = "the plugin reported no health"
			}
		}
	})
}
