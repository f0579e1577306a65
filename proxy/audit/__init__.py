"""The audit stream: one structured JSON line per decision (``proxy.audit.record``)."""

from proxy.audit.record import AuditLog, AuditRecord, AuditSettings

__all__ = ["AuditLog", "AuditRecord", "AuditSettings"]
