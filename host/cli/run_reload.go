package cli

import (
	"os"

	"berth.dev/berth/host/agent"
)

// waitSignal waits for a shutdown signal, reloading the agent's TLS
// material on every SIGHUP meanwhile. The agent logs each reload's outcome
// and keeps what it had when one fails.
func waitSignal(a *agent.Agent, signals, hup <-chan os.Signal) os.Signal {
	for {
		select {
		case sig := <-signals:
			return sig
		case <-hup:
			_ = a.ReloadTLS()
		}
	}
}
