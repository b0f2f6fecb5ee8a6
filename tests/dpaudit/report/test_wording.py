"""The report's wording: the status said plainly."""

from __future__ import annotations

from dpaudit.report.wording import status_sentence


def test_status_sentences():
    cert = {"for_release": True, "release_status": "for release"}
    assert status_sentence("FINISHED", cert)[0]
    assert status_sentence(None, None) == (False, status_sentence(None, None)[1])
    assert "NOT CLOSED" in status_sentence(None, None)[1]
    aborted = {"for_release": False, "release_status": "NOT FOR RELEASE: run aborted"}
    releasable, sentence = status_sentence("ABORTED", aborted)
    assert not releasable and sentence.startswith("NOT FOR RELEASE: the run did not finish (it closed ABORTED)")
    # a certificate that claims release for an aborted run still reads as not for release
    assert not status_sentence("ABORTED", cert)[0]
    assert not status_sentence("FINISHED", {"for_release": False, "release_status": "NOT FOR RELEASE: seeded"})[0]
