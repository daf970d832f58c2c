"""Training libraries wired to the ledger's gate: :mod:`privacy_ledger.integrations.opacus`.
(dp_accounting's ``DpEvent``s need no integration: every method taking an event takes them.)"""
