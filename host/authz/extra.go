package authz

import (
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/pb"
)

// Extra returns what a decoded request needs beyond its method's need:
//   - a job registered with a group that mounts a CSI volume needs
//     csi-mount-volume, and one with a task that is a CSI plugin
//     csi-register-plugin (Nomad's rules);
//   - a forced volume deregister needs operator write.
func Extra(fullMethod string, req any) []Need {
	var out []Need
	switch fullMethod {
	case pb.Jobs_Register_FullMethodName:
		r, _ := req.(*pb.JobRegisterRequest)
		mounts, plugins := false, false
		for _, g := range r.GetJob().GetGroups() {
			for _, v := range g.GetVolumes() {
				if v.GetType() == "" || v.GetType() == "csi" {
					mounts = true
				}
			}
			for _, t := range g.GetTasks() {
				if t.GetCsiPlugin() != nil {
					plugins = true
				}
			}
		}
		if mounts {
			out = append(out, need(acl.Volume, acl.CSIMountVolume))
		}
		if plugins {
			out = append(out, need(acl.Plugin, acl.CSIRegisterPlugin))
		}
	case pb.Volumes_Deregister_FullMethodName:
		if r, _ := req.(*pb.VolumeDeregisterRequest); r.GetForce() {
			out = append(out, need(acl.Operator, acl.CapWrite))
		}
	}
	return out
}
