"""One module per action kind of a run's plan (rig.orchestration.actions): each declares
its `Action` subclass, which `rig run` executes over the run context
(rig.orchestration.context.Context), beside the functions that render its printed items
for `rig plan` (rig.orchestration.plan), so what is printed and what runs are written in
one place. Dispatch is by type: `action.execute(ctx, stack)`.
"""
