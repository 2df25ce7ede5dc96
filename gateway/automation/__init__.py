"""automation: scheduled and triggered runs, cron jobs and signed webhooks.

A cron job sends a message to an agent session on a schedule; a webhook turns a signed JSON
delivery into such a message. Both become ordinary session inputs (the input ledger records
them before anything runs) and both can have the reply posted to a Discord or Slack channel
through the bindings' outbox. docs/automation.md is the user's guide.

The parts, one module each:

- `schedule`: cron expressions with a time zone, intervals, one-off times, and their slots;
- `catch_up`: which slots missed while the daemon was down still run;
- `jobs`, `delivery`: a job and where its reply goes, validated from `cron.add`/`cron.update`;
- `store`: jobs, runs and webhook deliveries in the database, and the claims that make a slot
  (or a delivery) run once;
- `run_log`, `job_list`: runs and jobs as clients see them;
- `launcher`, `job_runner`, `scheduler`: from a due slot to a session input;
- `templates`, `webhook_auth`, `rate_limit`, `webhooks`: the `/hooks/<name>` endpoint;
- `automation`: the owner the daemon starts and stops.
"""

from gateway.automation.automation import Automation
from gateway.automation.catch_up import CATCH_UP_POLICIES, CatchUp
from gateway.automation.errors import (
    AutomationError,
    DuplicateDelivery,
    InvalidJob,
    JobNotFound,
    Refused,
    SlotTaken,
)
from gateway.automation.job_list import JobsQuery, RunsQuery
from gateway.automation.schedule import Schedule, parse_schedule
from gateway.automation.webhook_auth import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from gateway.automation.webhooks import load_hooks

__all__ = [
    "CATCH_UP_POLICIES",
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Automation",
    "AutomationError",
    "CatchUp",
    "DuplicateDelivery",
    "InvalidJob",
    "JobNotFound",
    "JobsQuery",
    "Refused",
    "RunsQuery",
    "Schedule",
    "SlotTaken",
    "load_hooks",
    "parse_schedule",
    "sign",
]
