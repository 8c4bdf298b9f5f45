package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

type echo struct{ answer any }

// TestRequest: a typed answer, an error answer, a wrong type, silence
// (the timeout), a caller that left (ctx), one detached from its ctx's
// cancellation but not its deadline, and a dead pid.
func TestRequest(t *testing.T) {
	sys := newSystem(t)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*echo); ok && m.answer != nil {
			ctx.Respond(m.answer)
		}
	}))
	bg := context.Background()
	want := &ctl{n: 7}
	if got, err := actors.Request[*ctl](bg, sys.Root, pid, &echo{want}, time.Minute); err != nil || got != want {
		t.Fatalf("answer: %v, %v; want %v", got, err, want)
	}
	refusal := errors.New("refused")
	if _, err := actors.Request[*ctl](bg, sys.Root, pid, &echo{refusal}, time.Minute); err != refusal {
		t.Fatalf("an error answer came back as %v; want it as the error", err)
	}
	if _, err := actors.Request[*ctl](bg, sys.Root, pid, &echo{&sized{}}, time.Minute); err == nil {
		t.Fatal("an answer of another type was taken")
	}
	if _, err := actors.Request[*ctl](bg, sys.Root, pid, &echo{}, 20*time.Millisecond); !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("silence: %v; want actor.ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := actors.Request[*ctl](ctx, sys.Root, pid, &echo{}, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller gone: %v; want context.Canceled", err)
	}
	if got, err := actors.Request[*ctl](actors.Detached(ctx), sys.Root, pid, &echo{want}, time.Minute); err != nil || got != want {
		t.Fatalf("detached from a cancelled ctx: %v, %v; want the answer", got, err)
	}
	soon, cancelSoon := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancelSoon()
	if _, err := actors.Request[*ctl](actors.Detached(soon), sys.Root, pid, &echo{}, time.Hour); !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("detached, silence: %v; want actor.ErrTimeout at ctx's deadline", err)
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := actors.Request[*ctl](bg, sys.Root, pid, &echo{want}, time.Minute); !errors.Is(err, actor.ErrDeadLetter) {
		t.Fatalf("a stopped actor: %v; want actor.ErrDeadLetter", err)
	}
}
