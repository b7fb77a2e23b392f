"""The one rule for a candidate's name where it has less room than its length (kldtui.text): cut in
its middle, keeping its end where quant names differ, the names shown together told apart; wrapped
after a separator, never mid-word."""

from __future__ import annotations

from kldtui.text import short_name, short_names, wrap_name, wrap_words

KIMI = ("Kimi-K3-Instruct-Q4_K_M", "Kimi-K3-Instruct-Q4_K_S")


def test_a_name_that_fits_is_whole_and_a_long_one_keeps_its_end() -> None:
    assert short_name("q8_0", 18) == "q8_0"
    assert short_name(KIMI[0], len(KIMI[0])) == KIMI[0]
    shown = short_name(KIMI[0], 18)
    assert shown == "Kimi-…truct-Q4_K_M" and len(shown) == 18
    assert [short_name("abcdefghij", w) for w in range(5)] == ["", "…", "…j", "…ij", "a…ij"]


def test_two_long_names_sharing_their_start_read_differently() -> None:
    shown = short_names(KIMI, 18)
    assert shown[0] != shown[1] and shown[0].endswith("Q4_K_M") and shown[1].endswith("Q4_K_S")
    # where the ends are alike too, the cut keeps more of the start: 8b and 70b read differently
    eight, seventy = "llama-3.1-8b-instruct-q4_k_m", "llama-3.1-70b-instruct-q4_k_m"
    names = [eight, seventy, "q8", eight]
    shown = short_names(names, 18)
    assert shown == ["llama-3.1-8…q4_k_m", "llama-3.1-7…q4_k_m", "q8", "llama-3.1-8…q4_k_m"]
    assert all(len(name) <= 18 for name in shown)


def test_names_no_one_cut_tells_apart_each_take_their_own() -> None:
    # the first two differ in their third character, the last two in their fifth: a cut to 4 keeps
    # three of the seven characters, so no one cut separates all three
    names = ["aaXaaaa", "aaYaaaa", "aaYaZaa"]
    shown = short_names(names, 4)
    assert len(set(shown)) == 3 and all(len(name) == 4 and "…" in name for name in shown), shown


def test_a_name_wraps_after_a_separator_keeping_the_quant_whole() -> None:
    assert wrap_name(KIMI[0], 40) == [KIMI[0]]
    assert wrap_name(KIMI[0], 18) == ["Kimi-K3-Instruct-", "Q4_K_M"]
    assert wrap_name(KIMI[0], 12) == ["Kimi-K3-", "Instruct-", "Q4_K_M"]
    # a "_" only inside a part longer than a line; a part with no separator cut at the line's end
    assert wrap_name("Q4_K_M-imatrix", 5) == ["Q4_K_", "M-", "imatr", "ix"]
    assert wrap_name("abcdefghijklmnopqrstuvw-x", 10) == ["abcdefghij", "klmnopqrst", "uvw-x"]


def test_a_sentence_wraps_at_spaces_and_a_long_word_as_a_name() -> None:
    reason = "no GPU seen: the CPU kernel"
    assert wrap_words(reason, 80) == [reason] and wrap_words(reason, 0) == [reason]  # 0: not laid out
    assert wrap_words(reason, 12) == ["no GPU seen:", "the CPU", "kernel"]
    # a word longer than a line breaks as a name does, and its pieces are never joined by a space
    lines = wrap_words("file Kimi-K3-Instruct-Q4_K_M.gguf here", 12)
    assert lines == ["file", "Kimi-K3-", "Instruct-", "Q4_K_M.gguf", "here"], lines
    assert all(len(line) <= 12 for line in wrap_words("a " + "x" * 30 + " b", 12))
