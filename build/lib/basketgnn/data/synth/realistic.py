"""The ``realistic`` preset: a log from :data:`REALISTIC` dressed up as a retailer's raw export
(guests, cancellations, non-product codes, float-written customer ids), with its cleaned twin."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from basketgnn.data.synth.base import COLUMNS, MINUTE_NS, check
from basketgnn.data.synth.generate import generate_log

#: Non-product codes of the realistic export (item id -> what it stands for).
NON_PRODUCT_CODES = {
    "POST": "postage",
    "M": "manual adjustment",
    "BANK CHARGES": "bank charges",
    "D": "discount (in cancellation invoices, negative quantity)",
}

#: The realistic preset's generator settings (see :func:`realistic_export`), calibrated on a real
#: retailer's export: baskets of ~18 items (p90 ~42, max 500+), histories up to ~250 baskets,
#: ~3,000 customers with at least two baskets.
REALISTIC = {
    "n_customers": 6200,  # identified + guests (a quarter of the rows lose their customer)
    "n_items": 3600,
    "mean_baskets": 5.0,
    "max_baskets": 250,
    "history_spread": 1.3,
    "popularity_exponent": 0.9,
    "mean_favourites": 8.0,
    "rebuy_period": (2, 5),
    "background_items": 13.0,
    "basket_spread": 1.3,
    "bundle_fraction": 0.3,
    "bundle_size": (2, 4),
    "bundle_prob": 0.5,
    "mean_extra_quantity": 5.0,
}
# Shares of the realistic export: customers whose rows lose their id (guests), purchase rows
# later cancelled, and baskets that carry each non-product code.
_GUEST_SHARE = 0.25
_CANCEL_SHARE = 0.02
_CODE_BASKET_SHARE = {"POST": 0.06, "M": 0.004, "BANK CHARGES": 0.002}
_DISCOUNT_SHARE = 0.05  # of cancellation invoices, which also get a "D" row
_FIRST_INVOICE = 536365
_FIRST_CUSTOMER = 12346


@dataclass(frozen=True)
class RealisticExport:
    """A raw export shaped like a real retailer's and the same log cleaned.

    ``export``: one row per invoice line, in invoice-date order, columns :data:`COLUMNS`:
    ``customer_id`` str written as a float ("17850.0") or empty (no customer); ``basket_id`` the
    invoice number ("536365"; "C536412" for a cancellation); ``timestamp``; ``item_id`` (a
    product "I0042" or a code of :data:`NON_PRODUCT_CODES`); ``quantity`` int (< 0 in
    cancellations).
    ``clean``: the export without cancellation rows (quantity <= 0), non-product codes and rows
    without a customer, with customer ids written as integers ("17850"): what ingestion with
    returns excluded and the codes dropped keeps.
    """

    export: pd.DataFrame
    clean: pd.DataFrame


def realistic_export(seed: int = 0, scale: float = 1.0) -> RealisticExport:
    """The ``realistic`` preset: a log from :data:`REALISTIC` dressed up as a raw export.

    ``scale`` multiplies the number of customers (tests use a small one). Planted signal
    (re-buying, bundles, popularity skew, drift) is that of :func:`~basketgnn.data.synth.generate.generate_log`; the dressing
    adds guests (``_GUEST_SHARE`` of the customers lose their id), cancellation invoices for
    ``_CANCEL_SHARE`` of the purchase rows (negative quantity, a "C" invoice 1-72 h after the
    purchase, some with a "D" discount row), postage / manual / bank-charge rows, and
    float-written customer ids.
    """
    check(scale > 0, "scale must be > 0")
    settings = dict(REALISTIC, n_customers=max(2, round(REALISTIC["n_customers"] * scale)))
    log = generate_log(seed=seed, **settings)  # type: ignore[arg-type]
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])

    customer = log["customer_id"].str[1:].astype(np.int64).to_numpy()  # [rows] index
    n_cust = int(settings["n_customers"])
    guest = rng.random(n_cust) < _GUEST_SHARE  # [n_cust]
    number = _FIRST_CUSTOMER + rng.permutation(n_cust)  # [n_cust] numeric customer ids
    # Rows are grouped by basket, so factorize numbers the baskets in row order.
    basket_row, basket = pd.factorize(log["basket_id"])
    ts = log["timestamp"].to_numpy().astype(np.int64)
    first_row = np.flatnonzero(np.r_[True, basket_row[1:] != basket_row[:-1]])
    basket_ts = ts[first_row]  # [n_baskets]
    basket_cust = customer[first_row]
    # Invoice numbers in time order, as a till numbers them.
    invoice_of = np.empty(len(basket), dtype=np.int64)
    invoice_of[np.argsort(basket_ts, kind="stable")] = _FIRST_INVOICE + np.arange(len(basket))

    parts = [
        pd.DataFrame({
            "cust": customer, "invoice": invoice_of[basket_row].astype(str), "ts": ts,
            "item_id": log["item_id"].to_numpy(), "quantity": log["quantity"].to_numpy(),
        })
    ]  # fmt: skip
    # Non-product codes ride on purchase invoices.
    for code, share in _CODE_BASKET_SHARE.items():
        b = np.flatnonzero(rng.random(len(basket)) < share)
        parts.append(pd.DataFrame({
            "cust": basket_cust[b], "invoice": invoice_of[b].astype(str), "ts": basket_ts[b],
            "item_id": code, "quantity": rng.integers(1, 4, len(b)),
        }))  # fmt: skip
    # Cancellations: one "C" invoice per purchase invoice with cancelled lines.
    cancel = np.flatnonzero(rng.random(len(log)) < _CANCEL_SHARE)  # [k] rows
    c_basket, c_row_basket = np.unique(basket_row[cancel], return_inverse=True)
    c_invoice = invoice_of.max() + 1 + np.arange(len(c_basket))
    c_ts = basket_ts[c_basket] + rng.integers(1, 73, len(c_basket)) * 60 * MINUTE_NS
    parts.append(pd.DataFrame({
        "cust": customer[cancel], "invoice": np.char.add("C", c_invoice.astype(str))[c_row_basket],
        "ts": c_ts[c_row_basket], "item_id": log["item_id"].to_numpy()[cancel],
        "quantity": -log["quantity"].to_numpy()[cancel],
    }))  # fmt: skip
    d = np.flatnonzero(rng.random(len(c_basket)) < _DISCOUNT_SHARE)
    parts.append(pd.DataFrame({
        "cust": basket_cust[c_basket[d]], "invoice": np.char.add("C", c_invoice[d].astype(str)),
        "ts": c_ts[d], "item_id": "D", "quantity": -1,
    }))  # fmt: skip

    rows = pd.concat(parts, ignore_index=True)
    rows = rows.sort_values(["ts", "invoice"], kind="stable", ignore_index=True)
    cust = rows["cust"].to_numpy()
    is_guest = guest[cust]
    ids = number[cust].astype(str)
    export = pd.DataFrame(
        {
            "customer_id": np.where(is_guest, None, np.char.add(ids, ".0")).astype(object),
            "basket_id": rows["invoice"].to_numpy(),
            "timestamp": rows["ts"].to_numpy().astype("datetime64[ns]"),
            "item_id": rows["item_id"].to_numpy(),
            "quantity": rows["quantity"].to_numpy().astype(np.int64),
        },
        columns=list(COLUMNS),
    )
    keep = ~is_guest & (export["quantity"].to_numpy() > 0)
    keep &= ~export["item_id"].isin(list(NON_PRODUCT_CODES)).to_numpy()
    clean = export[keep].assign(customer_id=ids[keep]).reset_index(drop=True)
    return RealisticExport(export=export, clean=clean)
