package gateway

// aliveProbe is the payload of AliveMembers' notification of the config
// object: every member's watch answers it with the member's name.
const aliveProbe = "nvmetd-alive?"

// Liveness is who answered a liveness probe of the group's config object.
type Liveness struct {
	// Alive are the members whose watch of the config object answered
	// with their name, sorted and unique.
	Alive []string
	// Unnamed counts the watches that answered without a name: a gateway
	// of an older release (its liveness cannot be told: callers must not
	// act on the absence of a member then).
	Unnamed int
	// Silent counts the watches the OSD knows that did not answer within
	// the timeout: a crashed gateway (until its watch times out on the
	// OSD), a frozen one, or one cut from the cluster.
	Silent int
}
