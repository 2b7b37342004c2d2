package sweeper

// Tick is the message of the sweeper actor's timed pass.
type Tick = tick
