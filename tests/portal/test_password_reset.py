"""The password reset: the portal's pages and words, a link to the portal's own address by email (sent by
the control worker of a real gpuworker), the same answer for an unknown address, a limit per hour from one
address, and no working link in any log."""

import html
import logging
import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from portal.tasks import send_password_reset
from tests.support import BROKER_AWAY, celery_sends_to, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HOME = "10.0.0.1"
LINK = re.compile(r"http://portal\.test(/accounts/reset/\S+/)")


def ask(client, email: str, address: str = HOME, **headers):
    return client.post("/accounts/password_reset/", {"email": email}, REMOTE_ADDR=address, **headers)


@pytest.fixture
def sent(fleet, mailbox):
    """What the control worker emails."""
    return mailbox


def emailed_link(mailbox, to: str) -> str:
    message = wait_for(lambda: mailbox.to(to), what=f"the reset email to {to}")[0]
    assert message["Subject"] == "Set a new password for the E31 portal"
    return LINK.search(message.get_content())[1]


def test_the_login_page_links_to_it(client):
    page = client.get("/accounts/login/").content.decode()
    assert 'href="/accounts/password_reset/"' in page and "Forgot password?" in page


def test_without_a_mail_server_the_pages_say_no_email_comes_and_to_ask_an_operator(client, settings):
    settings.E31_EMAIL_HOST = ""  # the README's embedded run: emails go to the process's output
    assert "Your operator sets a new one." in client.get("/accounts/login/").content.decode()
    form = html.unescape(client.get("/accounts/password_reset/").content.decode())
    assert "This portal sends no email" in form and "ask your E31 operator to set one for you" in form
    done = client.get("/accounts/password_reset/done/").content.decode()
    assert "Ask an operator for a new password" in done and "Check your email" not in done


def test_it_emails_a_link_that_sets_a_new_password_to_log_in_with(client, partner, sent):
    page = client.get("/accounts/password_reset/").content.decode()
    assert "Set a new password" in page and "works once, for 3 days" in page
    response = ask(client, "partner@example.com")
    assert response.status_code == 302 and response["Location"] == "/accounts/password_reset/done/"
    assert "Check your email" in client.get(response["Location"]).content.decode()

    link = emailed_link(sent, "partner@example.com")
    form = client.get(link, follow=True)
    assert "Set your password" in form.content.decode()
    chosen = {"new_password1": "a long new passphrase 31", "new_password2": "a long new passphrase 31"}
    done = client.post(form.redirect_chain[-1][0], chosen, follow=True)
    assert "Your password is set" in done.content.decode()
    assert "This link no longer works" in client.get(link, follow=True).content.decode(), "it works once"

    login = {"username": "partner", "password": "a long new passphrase 31"}
    assert client.post("/accounts/login/", login, REMOTE_ADDR=HOME)["Location"] == "/jobs/"


def test_it_answers_an_unknown_address_as_it_answers_a_known_one(client, partner, sent):
    unknown, known = ask(client, "nobody@example.com"), ask(client, "partner@example.com")
    assert (known.status_code, known["Location"]) == (unknown.status_code, unknown["Location"])
    emailed_link(sent, "partner@example.com")
    assert not sent.to("nobody@example.com")


def test_it_links_to_the_portal_s_address_whatever_host_the_request_named(client, partner, sent, settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "evil.example"]
    assert ask(client, "partner@example.com", HTTP_HOST="evil.example").status_code == 302
    message = wait_for(lambda: sent.to("partner@example.com"))[0].get_content()
    assert "evil.example" not in message and LINK.search(message)


def test_it_finds_the_account_of_an_address_typed_with_invisible_characters(client, partner, sent):
    ask(client, "\u200bpartner@exa\u202emple.com")
    assert emailed_link(sent, "partner@example.com")


def test_it_lets_an_accepted_applicant_who_lost_the_first_link_set_a_password(client, sent):
    newcomer = get_user_model().objects.create(username="ada@lab.example", email="ada@lab.example")
    newcomer.set_unusable_password()
    newcomer.save()
    ask(client, "ada@lab.example")
    assert emailed_link(sent, "ada@lab.example")


def test_it_refuses_the_sixth_ask_in_an_hour_and_keeps_what_was_typed(client, partner, sent):
    for number in range(5):
        assert ask(client, f"someone{number}@example.com").status_code == 302, f"ask {number + 1} is taken"
    response = ask(client, "partner@example.com")
    page = response.content.decode()
    assert response.status_code == 429
    assert "too many asks for a new password from your address in the last hour" in page
    assert 'value="partner@example.com"' in page
    assert ask(client, "partner@example.com", address="10.0.0.2").status_code == 302, "another address is not held"
    assert len(wait_for(lambda: sent.to("partner@example.com"))) == 1


def test_it_writes_no_working_link_to_the_log_without_a_mail_server(partner, settings, capsys, caplog):
    """The control worker's half of an ask, run here where the settings say there is no mail server."""
    settings.E31_EMAIL_HOST = ""
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    with caplog.at_level(logging.INFO):
        assert send_password_reset("partner@example.com")
    written = capsys.readouterr()
    everything = written.out + written.err + caplog.text
    assert "/accounts/reset/" not in everything
    assert "partner asked for a password reset; with no mail server (E31_EMAIL_HOST) no link is sent" in caplog.text
    assert "manage.py changepassword partner" in caplog.text


class Recorder(logging.Handler):
    """The messages of the records a logger's handlers would write, after its filters."""

    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize(
    ("logger", "message"),
    [
        ("django.server", ('"%s" %s %s', "GET {path} HTTP/1.1", "302", "0")),  # as runserver writes its lines
        ("django.request", ("Not Found: %s", "{path}")),
    ],
)
def test_it_redacts_the_token_of_a_reset_link_in_the_request_logs(partner, logger, message):
    uid = urlsafe_base64_encode(force_bytes(partner.pk))
    token = default_token_generator.make_token(partner)
    path = reverse("password_reset_confirm", kwargs={"uidb64": uid, "token": token})
    recorder, target = Recorder(), logging.getLogger(logger)
    target.addHandler(recorder)
    try:
        template, *args = message
        target.warning(template, *(arg.format(path=path) for arg in args))
        target.warning(template, *(arg.format(path="/jobs/7/") for arg in args))
    finally:
        target.removeHandler(recorder)
    written = "\n".join(recorder.messages)
    assert token not in written and f"/accounts/reset/{uid}/[token]/" in written
    assert "/jobs/7/" in recorder.messages[1]


def test_it_says_so_and_keeps_the_address_when_the_job_queue_is_away(client, partner):
    with celery_sends_to(BROKER_AWAY):
        response = ask(client, "partner@example.com")
    page = response.content.decode()
    assert response.status_code == 503
    assert "The job queue is unreachable just now: no link could be sent. Please ask again in a minute." in page
    assert 'value="partner@example.com"' in page
