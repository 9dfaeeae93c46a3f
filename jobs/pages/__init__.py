"""The pages of jobs: the views, the job form, the operators' console (admin) and the charts they draw. They
sit on top of the engine (lifecycle, services, staging, scheduling, workers, outputs, processors) and may
read billing; nothing below imports them (pyproject.toml's layers contract)."""
