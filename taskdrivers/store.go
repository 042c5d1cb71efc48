package taskdrivers

import "berth.dev/berth/rpc/pb"

// Store persists what the manager must find again after the client
// restarts. The client state DB (host/client/state) implements it.
type Store interface {
	PluginStore
	TaskHandleStore
}

// PluginStore keeps the reattach configs of running driver plugins.
type PluginStore interface {
	// DriverPlugins returns every record; records that could not be read
	// are reported in the error next to the good ones.
	DriverPlugins() ([]*pb.DriverPluginRecord, error)
	PutDriverPlugin(*pb.DriverPluginRecord) error
	DeleteDriverPlugin(name string) error
}

// TaskHandleStore keeps the handles of tasks the drivers started, by task ID.
type TaskHandleStore interface {
	// TaskHandles returns every handle; records that could not be read are
	// reported in the error next to the good ones.
	TaskHandles() ([]*pb.TaskHandleRecord, error)
	TaskHandle(taskID string) (*pb.TaskHandleRecord, bool, error)
	PutTaskHandle(*pb.TaskHandleRecord) error
	DeleteTaskHandle(taskID string) error
}
