-- Usage-based billing, part 2 (issue 29): a plan's usage charges per meter (docs/usage.md, "Pricing").
CREATE TABLE billing.plan_charge (
    plan_id        bigint      NOT NULL CONSTRAINT plan_charge_plan_fkey REFERENCES billing.plan (id),
    meter_code     text        NOT NULL CONSTRAINT plan_charge_meter_fkey REFERENCES billing.meter (code),
    model          text        NOT NULL,
    unit_amount    numeric,
    package_size   bigint,
    tiers          jsonb       NOT NULL DEFAULT '[]'::jsonb,
    included_units numeric     NOT NULL DEFAULT 0,
    minimum_amount bigint,
    maximum_amount bigint,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    CONSTRAINT plan_charge_pkey PRIMARY KEY (plan_id, meter_code),
    CONSTRAINT plan_charge_model_known CHECK (model IN ('per_unit', 'graduated', 'volume', 'package')),
    CONSTRAINT plan_charge_amounts CHECK (unit_amount IS NULL OR unit_amount >= 0),
    CONSTRAINT plan_charge_package CHECK ((model = 'package') = (package_size IS NOT NULL) AND (package_size IS NULL OR package_size > 0)),
    CONSTRAINT plan_charge_included CHECK (included_units >= 0),
    CONSTRAINT plan_charge_bounds CHECK (minimum_amount IS NULL OR minimum_amount >= 0),
    CONSTRAINT plan_charge_bounds_order CHECK (maximum_amount IS NULL OR maximum_amount >= coalesce(minimum_amount, 0))
);
COMMENT ON TABLE billing.plan_charge IS 'A plan''s usage charge for one meter, in the plan''s currency: a pricing model over the period''s quantity.';
COMMENT ON COLUMN billing.plan_charge.model IS 'per_unit (unit_amount per unit), graduated (each tier''s slice at its price), volume (the whole quantity at the tier it reaches), package (unit_amount per started package of package_size units).';
COMMENT ON COLUMN billing.plan_charge.unit_amount IS 'Minor units per unit (per_unit; may be fractional) or per package (package).';
COMMENT ON COLUMN billing.plan_charge.tiers IS 'graduated/volume: [{"upTo": n|null, "unitAmount": x, "flatAmount": n}], upTo ascending, the last null (no bound).';
COMMENT ON COLUMN billing.plan_charge.included_units IS 'Units of the period not charged (taken off the quantity first).';
COMMENT ON COLUMN billing.plan_charge.minimum_amount IS 'The least the charge bills per period (NULL: none).';
COMMENT ON COLUMN billing.plan_charge.maximum_amount IS 'The most the charge bills per period (NULL: none).';
REVOKE ALL ON billing.plan_charge FROM PUBLIC;
