// Package driverpb is the generated Go code of berth's task driver protocol,
// sdk/proto/berth/driver/v1/driver.proto (`make proto` regenerates it). The
// messages are the types of sdk.Driver's methods; the gRPC service is
// served and called by package sdk, so drivers and berth rarely touch it
// directly.
package driverpb
