//go:build !unix

package clustertest

import (
	"errors"
	"os"
)

var errNoSignals = errors.New("clustertest: freezing and stopping a member needs a unix system's signals")

func freeze(*os.Process) error { return errNoSignals }
func thaw(*os.Process) error   { return errNoSignals }
func stop(*os.Process) error   { return errNoSignals }
