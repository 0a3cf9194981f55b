"""Secret hashing: passwords under scrypt, token secrets under one salted SHA-256 (256 random
bits need no cost per guess), and token records hashed with scrypt by earlier versions still
verify."""

from __future__ import annotations

from lake_platform.catalog.principals import (
    DUMMY_TOKEN_HASH,
    hash_secret,
    hash_token_secret,
    new_token,
    verify_secret,
)


def test_a_token_secret_is_stored_salted_under_sha256_and_checked() -> None:
    _, secret, _ = new_token()
    stored = hash_token_secret(secret)
    assert stored.startswith("sha256$") and secret not in stored
    assert stored != hash_token_secret(secret)  # salted: the same secret hashes differently
    assert verify_secret(secret, stored, dummy=DUMMY_TOKEN_HASH)
    assert not verify_secret(secret + "x", stored, dummy=DUMMY_TOKEN_HASH)
    assert not verify_secret(secret[:-1], stored, dummy=DUMMY_TOKEN_HASH)


def test_an_unknown_token_burns_a_check_and_fails() -> None:
    assert not verify_secret("", None, dummy=DUMMY_TOKEN_HASH)
    assert not verify_secret("0" * 64, None, dummy=DUMMY_TOKEN_HASH)


def test_a_token_hashed_with_scrypt_by_an_earlier_version_still_verifies() -> None:
    _, secret, _ = new_token()
    stored = hash_secret(secret)
    assert stored.startswith("scrypt$")
    assert verify_secret(secret, stored, dummy=DUMMY_TOKEN_HASH)
    assert not verify_secret(secret + "x", stored, dummy=DUMMY_TOKEN_HASH)


def test_a_malformed_stored_hash_fails_the_check() -> None:
    for stored in ("sha256$zz$00", "sha256$00", "scrypt$1$2", "plain"):
        assert not verify_secret("secret", stored, dummy=DUMMY_TOKEN_HASH)
