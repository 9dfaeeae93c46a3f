"""Signals other apps listen to: billing hears when staging ends and when a hold is released; webhooks hear
every change of a job's state, and a deadline told at submit that can no longer be met."""

from django.dispatch import Signal

# sent when a job ends, with job, gpus (how many it held) and holds: (held_from, held_to) of each allocation
hold_released = Signal()
# sent with job, size (bytes staged), started, finished
staging_finished = Signal()
# sent once the change is committed (never for one rolled back), with job_id, state (the new one), previous
# and at; robustly: a listener that raises is logged, and the job's move stands
state_changed = Signal()
# sent once committed, with job_id and at, when a job told at submit that its deadline could be met is told it
# no longer can (jobs.scheduling.promises); once per job
deadline_at_risk = Signal()
