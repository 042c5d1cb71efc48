// Package registry is a client's dynamic CSI plugin registry: the plugins
// that run as tasks with a csi_plugin block, registered by their supervisor
// hook once healthy and deregistered when their task stops, for the plugin
// manager to fingerprint and report to the servers.
//
// # Entries
//
// An entry is a pb.CSIPluginRegistration keyed by type (controller or
// node), plugin ID and alloc ID (Key). Register adds or replaces entries; a
// monolith registers a controller and a node entry at once. SetHealth
// records a health transition, Deregister removes an alloc's entries for one
// plugin (its task stopped, for good or to restart) and DeregisterAlloc all
// of an alloc's entries. Removing what is not there is not an error.
//
// Two allocs of one plugin on one node (an update) both have entries. List
// shows both; Serving returns the one that serves: the newest healthy one
// (newest by the alloc's create index, then by registration time), or the
// newest when none is healthy. The older entry stays until its task stops.
//
// # Subscribing
//
// Subscribe returns a channel with the current entries first (as
// EventRegistered events, the snapshot) and then every change in order,
// each Event numbered by Seq. Nothing falls between the snapshot and the
// live events and nothing arrives twice, because both are taken under the
// lock every change holds. Each subscriber has its own unbounded queue: a
// slow reader loses no event and never blocks a Register. Cancelling the
// context unsubscribes and closes the channel.
//
//	events := reg.Subscribe(ctx)
//	for ev := range events {
//		switch ev.Kind {
//		case registry.EventRegistered: // add or replace ev.Entry.Key()
//		case registry.EventDeregistered: // remove it
//		}
//	}
//
// # Persistence and restart
//
// Every change is written to the Store (the client state DB,
// host/client/state) in one atomic write before it is applied and queued
// to subscribers, and the registry's lock is held across both, so no
// reader ever sees an entry the store lacks and the store sees changes in
// the order subscribers do. If the store refuses a change, nothing changes.
//
// After a client restart, New then Restore takes back the stored entries.
// Restore asks an AllocLive function (the client's alloc runners) about
// each entry's alloc and drops, from the store too, those whose alloc is
// gone or terminal. The restored entries have NeedsProbe set: their health
// dates from before the restart, so the plugin manager probes them again;
// the next Register or SetHealth of an entry clears it. The plugin tasks
// themselves keep running, so a restarted client finds its plugins without
// restarting them.
//
// This package imports nothing of host/: Store is declared here and the
// state DB satisfies it with the proto record as the stored type.
package registry
