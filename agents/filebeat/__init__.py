"""Filebeat on a node: its adapter, the patch of the operator's filebeat.yml and input files, the first config
the testbed renders, its /stats and registry as metrics, and the watch of the files it harvests."""
