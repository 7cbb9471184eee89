"""`ember service`: Ember's server as a per-user background service (issue 43).

One description of the service (app.service.spec) is written out as whatever the platform
runs at login: a systemd user unit, a launchd agent or a Windows logon task
(app.service.units). Where none of them can run (a container without a user manager), a small
supervisor of Ember's own keeps `ember serve` up instead (app.service.supervisor). The running
server announces itself in the data folder (app.service.endpoint), where the window and
`ember service status` find it.
"""
