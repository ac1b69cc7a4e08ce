"""Typed, keyword-only storage functions. Callers own the session and its transaction.

One module per concern; this package re-exports their public names so callers write
`repo.get_analysis(...)` without knowing which module holds it:

- `ids`: analysis ids (ULIDs)
- `lifecycle`: drafts, pending rows, idempotency keys, failure
- `completion`: storing finished analyses (findings, files, blobs, rule versions, duplicates)
- `retriage`: replacing a stored result, with what changed
- `listing`: the history (filters, search, pagination)
- `feedback`: verdicts on a root cause
- `standing`: recurrence, suspect hosts, stats and trends
- `rules`: rule versions as matched
- `tokens`: API tokens
- `slack`: Slack deliveries taken and messages posted
- `housekeeping`: blob rows for the garbage collector
"""

from app.db.repo.common import finding_hosts
from app.db.repo.completion import (
    Completion,
    FileRecord,
    RuleRecord,
    StoredBlob,
    blob_referenced,
    complete_analyses,
    log_digest,
    mark_interrupted,
    pending_runner_pids,
)
from app.db.repo.feedback import add_feedback
from app.db.repo.housekeeping import delete_blob_rows, known_blobs, unreferenced_blobs
from app.db.repo.ids import id_time, is_valid_id, new_id
from app.db.repo.lifecycle import (
    Draft,
    JobMeta,
    create_pending,
    delete_analysis,
    fail_analysis,
    find_idempotent,
    get_analysis,
    insert_pending,
    is_retryable_failure,
    pending_row,
    reserve_key,
    restart_failed,
)
from app.db.repo.listing import (
    AnalysisFilter,
    count_analyses,
    decode_cursor,
    encode_cursor,
    feedback_counts,
    finding_hosts_of,
    has_newer,
    list_analyses,
    root_confidences,
)
from app.db.repo.outcomes import (
    add_outcome,
    failure_to_link,
    outcome_counts,
    outcome_of_analysis,
    outcome_of_attempt,
    outcomes_of_job,
)
from app.db.repo.retriage import (
    apply_retriage,
    diff_results,
    result_summary,
    retriage_candidates,
    retriages_of,
)
from app.db.repo.rules import finding_rule_versions, rule_version_text, rule_versions
from app.db.repo.slack import (
    add_slack_message,
    claim_slack_event,
    prune_slack_events,
    slack_messages_of,
    slack_thread_head,
)
from app.db.repo.standing import (
    ODD_RANK_CLASS,
    Standing,
    SuspectHost,
    clear_host,
    result_hardware_hosts,
    rule_activity,
    rule_comments,
    rule_feedback,
    standing_of,
    stats,
    suspect_hosts,
)
from app.db.repo.tokens import (
    SCOPES,
    TOKEN_PREFIX,
    any_active_token,
    create_token,
    hash_token,
    list_tokens,
    revoke_token,
    token_by_hash,
    token_for_secret,
    touch_due,
    touch_token,
)

__all__ = [
    "ODD_RANK_CLASS",
    "SCOPES",
    "TOKEN_PREFIX",
    "AnalysisFilter",
    "Completion",
    "Draft",
    "FileRecord",
    "JobMeta",
    "RuleRecord",
    "Standing",
    "StoredBlob",
    "SuspectHost",
    "add_feedback",
    "add_outcome",
    "add_slack_message",
    "any_active_token",
    "apply_retriage",
    "blob_referenced",
    "claim_slack_event",
    "clear_host",
    "complete_analyses",
    "count_analyses",
    "create_pending",
    "create_token",
    "decode_cursor",
    "delete_analysis",
    "delete_blob_rows",
    "diff_results",
    "encode_cursor",
    "fail_analysis",
    "failure_to_link",
    "feedback_counts",
    "find_idempotent",
    "finding_hosts",
    "finding_hosts_of",
    "finding_rule_versions",
    "get_analysis",
    "has_newer",
    "hash_token",
    "id_time",
    "insert_pending",
    "is_retryable_failure",
    "is_valid_id",
    "known_blobs",
    "list_analyses",
    "list_tokens",
    "log_digest",
    "mark_interrupted",
    "new_id",
    "outcome_counts",
    "outcome_of_analysis",
    "outcome_of_attempt",
    "outcomes_of_job",
    "pending_row",
    "pending_runner_pids",
    "prune_slack_events",
    "reserve_key",
    "restart_failed",
    "result_hardware_hosts",
    "result_summary",
    "retriage_candidates",
    "retriages_of",
    "revoke_token",
    "root_confidences",
    "rule_activity",
    "rule_comments",
    "rule_feedback",
    "rule_version_text",
    "rule_versions",
    "slack_messages_of",
    "slack_thread_head",
    "standing_of",
    "stats",
    "suspect_hosts",
    "token_by_hash",
    "token_for_secret",
    "touch_due",
    "touch_token",
    "unreferenced_blobs",
]
