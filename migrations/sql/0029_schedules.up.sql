-- Schedules (Config.Schedules): one row a schedule, which the replica that fires it locks (FOR
-- UPDATE SKIP LOCKED) in the transaction that starts its executions and moves handled_through, so
-- that each fire time starts one execution across all replicas. {{schema}} is replaced by the
-- target schema. A table on the coordinator, like leases: on Citus it is not distributed, and no
-- statement joins it with the distributed tables.
--
-- graph_name, graph_version, cron and location are the definition of the replica that last
-- recorded or fired the schedule, for journey schedules and the dashboard; each replica fires by
-- its own. handled_through: every fire time up to it has been handled (started, or skipped by
-- CatchUp). last_fire: the latest fire time that started an execution, NULL before the first.
-- next_fire: the first fire time after handled_through, NULL if the cron fires no more.
CREATE TABLE IF NOT EXISTS {{schema}}.schedules (
    name            text        PRIMARY KEY,
    graph_name      text        NOT NULL,
    graph_version   text        NOT NULL,
    cron            text        NOT NULL,
    location        text        NOT NULL,
    catch_up        text        NOT NULL,
    handled_through timestamptz NOT NULL,
    last_fire       timestamptz,
    next_fire       timestamptz,
    updated_at      timestamptz NOT NULL
);
