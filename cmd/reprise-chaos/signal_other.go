//go:build !unix

package main

import "errors"

var errNoSignals = errors.New("--nats-pause needs SIGSTOP and SIGCONT (a Unix system)")

func signalNATS(int, bool) error { return errNoSignals }

func natsAlive(int) error { return errNoSignals }
