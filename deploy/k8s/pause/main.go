// Command pause is the sandbox ("infra") container of every Pod on the test node of
// deploy/k8s/cluster.sh: it holds the Pod's namespaces, reaps the zombies of a shared PID
// namespace and exits on SIGINT/SIGTERM. Built locally (no registry is reachable on the
// test machines) into the image mts/pause, which containerd's CRI uses as sandbox_image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren waits for every exited child without blocking (PID 1 of a shared namespace
// inherits orphans).
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
