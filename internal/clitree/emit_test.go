package clitree

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// countingWriter counts the Write calls that reach it (each is a write(2) on os.Stdout).
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.Buffer.Write(p)
}

// A table reaches the output in one write, not one per cell (emit buffers it): a 16-instance
// mdev create's table was ~290 write(2)s, costly under TCG in the lab (issue 19).
func TestEmitTableIsOneWrite(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	var out countingWriter
	app := newApp(testEnv())
	app.Writer, app.ErrWriter = &out, &out
	if err := app.Run(context.Background(), []string{"vgpu-host", "--host-root", tr.Dir(), "mdev", "create", "--parent", "mbochs", "--type", "small", "--count", "8", "--name", "vm1"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 9 || !strings.HasPrefix(lines[0], "INSTANCE") || !strings.Contains(lines[8], "vm1") {
		t.Fatalf("table:\n%s", out.String())
	}
	if out.writes != 1 {
		t.Fatalf("the table took %d writes, want 1", out.writes)
	}
}
