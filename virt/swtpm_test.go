package virt

import (
	"errors"
	"strings"
	"testing"
)

// TestWithSwtpmHint: a start failing in swtpm_setup gets the fix, still wrapping the error;
// any other error and nil pass unchanged.
func TestWithSwtpmHint(t *testing.T) {
	base := errors.New("start domain vm: internal error: Could not run '/usr/bin/swtpm_setup'. exitstatus: 1")
	got := WithSwtpmHint(base)
	if !errors.Is(got, base) || !strings.Contains(got.Error(), "chown -R tss:root /var/lib/swtpm-localca") {
		t.Errorf("swtpm_setup failure: %v", got)
	}
	other := errors.New("start domain vm: operation failed")
	if got := WithSwtpmHint(other); got != other {
		t.Errorf("other error changed: %v", got)
	}
	if WithSwtpmHint(nil) != nil {
		t.Error("nil became an error")
	}
}
