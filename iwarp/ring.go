package iwarp

// ring is a fixed-capacity FIFO of values; slots are reused in place so that
// steady-state use does not allocate.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func newRing[T any](capacity int) ring[T] { return ring[T]{buf: make([]T, max(capacity, 1))} }

func (r *ring[T]) len() int   { return r.n }
func (r *ring[T]) cap() int   { return len(r.buf) }
func (r *ring[T]) full() bool { return r.n == len(r.buf) }

// push appends a zeroed slot and returns it. The caller checks full first.
func (r *ring[T]) push() *T {
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.n++
	var zero T
	r.buf[i] = zero
	return &r.buf[i]
}

// at returns the i-th element from the head.
func (r *ring[T]) at(i int) *T {
	i += r.head
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return &r.buf[i]
}

// pop drops the head element.
func (r *ring[T]) pop() {
	var zero T
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
}
