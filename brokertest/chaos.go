package brokertest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// ChaosSeedEnv names the variable that fixes a chaos test's seed.
const ChaosSeedEnv = "FELIX_CHAOS_SEED"

// ChaosRand returns the random source of a chaos test: seeded from
// FELIX_CHAOS_SEED when it is set, else from the clock. It logs the seed
// first, so a failing run's own choices (which kind of actor to kill,
// when) can be replayed with FELIX_CHAOS_SEED=<seed>. The broker's pick
// among the actors of a kind, and the scheduling around it all, are not
// replayed.
func ChaosRand(tb testing.TB) *rand.Rand {
	tb.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(ChaosSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("%s=%q: want an unsigned integer", ChaosSeedEnv, s)
		}
		seed = n
	}
	tb.Logf("chaos seed %d (replay with %s=%d)", seed, ChaosSeedEnv, seed)
	// PCG takes two words; the second is fixed so one number names a run.
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}
