// Package storagepb is the generated code of berth.storage.v1 (see
// sdk/proto/berth/storage/v1/storage.proto), the plugin-level service a
// storage adapter serves next to the CSI services. sdk.ServeStorageAdapter
// implements it; adapter authors do not import this package.
package storagepb
