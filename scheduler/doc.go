// Package scheduler fires the schedules of Config.Schedules: each replica that defines a schedule
// wakes at its next fire time (and at least every Interval), and fires what is due in one
// transaction a schedule, which locks the schedule's row with SKIP LOCKED, starts the executions
// and moves the row on (persistence.FireSchedule): each fire time starts one execution across all
// replicas, whichever of them are up. What a row and the time make due is a pure function, Plan,
// of the fire times that the cron library gives (github.com/robfig/cron/v3), read as wall-clock
// times in the schedule's location (Next).
//
// It may import graph, persistence and internal packages, never actors or the root package. It
// writes no SQL: persistence holds all of it.
//
// It is one of the engine's parts. Its API carries no compatibility promise before v1: build on
// the root package, journey, which wires the parts together.
package scheduler
