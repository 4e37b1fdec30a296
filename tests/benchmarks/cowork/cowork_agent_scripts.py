"""Scripted "agents" for the cowork_mini DB tasks: Python run inside the agent container.

They do what a capable agent would do through its tools: write the rows (psycopg2, the
sidecar's PG* environment) and, where the task asks, the workbook (openpyxl).
"""

GCAL_STANDUP = r"""
import psycopg2
conn = psycopg2.connect(dbname="cowork_gym")  # PGHOST, PGUSER, PGPASSWORD: the agent role
with conn, conn.cursor() as cur:
    for day in ("2026-03-03", "2026-03-04", "2026-03-05"):
        cur.execute(
            "INSERT INTO gcal.events (summary, start_datetime, end_datetime) VALUES (%s, %s, %s)",
            ("Daily standup", day + " 09:30:00+00", day + " 09:45:00+00"),
        )
print("created 3 events")
"""

EMAIL_WEEKLY_REPORT = r"""
import csv, json, openpyxl, psycopg2
ws_dir = "/workspace/dumps/workspace"
wb = openpyxl.Workbook(); ws = wb.active; ws.title = "Report"
ws.append(["Metric", "Value"])
for row in csv.DictReader(open(ws_dir + "/metrics.csv")):
    ws.append([row["metric"], int(row["value"])])
wb.save(ws_dir + "/Weekly_Report.xlsx")
conn = psycopg2.connect(dbname="cowork_gym")  # PGHOST, PGUSER, PGPASSWORD: the agent role
with conn, conn.cursor() as cur:
    cur.execute("SELECT id FROM email.folders WHERE name = 'Sent'")
    sent = cur.fetchone()[0]
    cur.execute(
        "INSERT INTO email.messages (folder_id, subject, from_addr, to_addr, body_text) "
        "VALUES (%s, %s, %s, %s::jsonb, %s) RETURNING id",
        (sent, "Weekly report", "me@company.ru", json.dumps(["boss@company.ru"]),
         "Hi, the numbers are in Weekly_Report.xlsx."),
    )
    cur.execute("INSERT INTO email.sent_log (message_id) VALUES (%s)", (cur.fetchone()[0],))
print("report written and sent")
"""

EMAIL_REPLY_INVOICE = r"""
import json, psycopg2
conn = psycopg2.connect(dbname="cowork_gym")  # PGHOST, PGUSER, PGPASSWORD: the agent role
with conn, conn.cursor() as cur:
    cur.execute("SELECT subject FROM email.messages WHERE from_addr = 'client@example.com'")
    subject = cur.fetchone()[0]
    cur.execute("SELECT id FROM email.folders WHERE name = 'Sent'")
    sent = cur.fetchone()[0]
    cur.execute(
        "INSERT INTO email.messages (folder_id, subject, from_addr, to_addr, body_text) "
        "VALUES (%s, %s, %s, %s::jsonb, %s) RETURNING id",
        (sent, "Re: " + subject, "me@company.ru", json.dumps(["client@example.com"]),
         "Добрый день! Счёт №4512 оплачен."),
    )
    cur.execute("INSERT INTO email.sent_log (message_id) VALUES (%s)", (cur.fetchone()[0],))
print("reply sent")
"""

SCRIPTS = {
    "gcal-standup-week": GCAL_STANDUP,
    "email-weekly-report": EMAIL_WEEKLY_REPORT,
    "email-reply-invoice": EMAIL_REPLY_INVOICE,
}
