"""Deployments: several named models served at once, each with one or more replicas on
their own nodes, behind the gateway (``halo run --name``, ``halo stop NAME``).

    groups      which nodes each replica gets and on which port (pure)
    units       a replica as the bring-up serves it: the cluster narrowed to its nodes
    run         add or replace one deployment: every replica served and proven
    stop        stop one deployment, or every one
    view        each deployment's replicas and their health, for 'halo status'
"""
