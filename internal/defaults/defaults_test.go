package defaults

import (
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	var n int
	Set(&n, 7)
	Set(&n, 9)
	d := -time.Second
	Set(&d, time.Minute) // negative is not zero: kept
	var s string
	Set(&s, "x")
	var p *int
	Set(&p, &n)
	if n != 7 || d != -time.Second || s != "x" || p != &n {
		t.Fatalf("%d %v %q %v", n, d, s, p)
	}
}
