package iwarp

// ring is a FIFO of values with a fixed limit. Its storage starts small and
// doubles up to the limit as the queue fills, so a connection that never
// gets busy never pays for its full depth; slots are reused in place, so
// steady-state use does not allocate.
type ring[T any] struct {
	buf   []T
	head  int
	n     int
	limit int
}

// ringStart is the initial number of slots.
const ringStart = 8

func newRing[T any](limit int) ring[T] {
	limit = max(limit, 1)
	return ring[T]{buf: make([]T, min(limit, ringStart)), limit: limit}
}

func (r *ring[T]) len() int   { return r.n }
func (r *ring[T]) full() bool { return r.n >= r.limit }

// room is how many more elements fit.
func (r *ring[T]) room() int { return r.limit - r.n }

// push appends a zeroed slot and returns it. The caller checks full first.
func (r *ring[T]) push() *T {
	if r.n == len(r.buf) {
		r.grow()
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.n++
	var zero T
	r.buf[i] = zero
	return &r.buf[i]
}

func (r *ring[T]) grow() {
	nb := make([]T, min(max(2*len(r.buf), 1), r.limit))
	for i := 0; i < r.n; i++ {
		nb[i] = *r.at(i)
	}
	r.buf, r.head = nb, 0
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
