"""Engine.

From a task to one pure generation step (ask, roll out, tell) scanned in jitted blocks and
vmapped over seeds; the task's env, policy and samplers; baselines; devices and processes.
Nothing here reads or writes files.
"""
