-- The SQL handler's example: paying an order exactly once.
--
--   sqlgroup group create orders --parts 16
--   psql -f examples/handlers/pay_order.sql
--   sqlgroup consume --group orders --handler sql:shop.pay_order
--
-- Each item's key is an order id. shop.pay_order is called by the
-- statement that acknowledges the item (the fenced delete), so the order
-- is marked paid if and only if the item is acknowledged: exactly once,
-- even if the member is killed mid-item. (It must not be STRICT: an
-- unkeyed item's key is NULL.) An order that does not exist can never be paid: it
-- raises SQLSTATE 'SGDLQ', which dead-letters the item at once (any other
-- error is retried with a backoff).
CREATE SCHEMA IF NOT EXISTS shop;

CREATE TABLE IF NOT EXISTS shop.orders (
  id text PRIMARY KEY,
  state text NOT NULL DEFAULT 'pending',
  amount_cents bigint NOT NULL,
  paid_at timestamptz
);

-- $1 key (the order id), $2 payload (bytea: here JSON, {"amount_cents": N}),
-- $3 the item's id.
CREATE OR REPLACE FUNCTION shop.pay_order(order_id text, payload bytea,
                                          item_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  paid bigint := (convert_from(payload, 'UTF8')::jsonb ->> 'amount_cents')::bigint;
BEGIN
  UPDATE shop.orders SET state = 'paid', paid_at = now()
   WHERE id = order_id AND state = 'pending' AND amount_cents = paid;
  IF NOT FOUND THEN
    IF NOT EXISTS (SELECT 1 FROM shop.orders WHERE id = order_id) THEN
      RAISE EXCEPTION 'order % does not exist (item %)', order_id, item_id
        USING ERRCODE = 'SGDLQ';
    END IF;
    -- Already paid (a second payment message for it), or the amount is
    -- wrong: leave the order alone and say so in the dead letters.
    RAISE EXCEPTION 'order % is not pending with amount %', order_id, paid
      USING ERRCODE = 'SGDLQ';
  END IF;
END $$;

-- Some orders to pay, one item each, when the group exists.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM sqlgroup.groups WHERE name = 'orders')
     AND NOT EXISTS (SELECT 1 FROM shop.orders) THEN
    INSERT INTO shop.orders (id, amount_cents)
    SELECT 'o-' || i, 100 * i FROM generate_series(1, 1000) i;
    PERFORM sqlgroup.enqueue('orders', id,
                             convert_to(json_build_object('amount_cents', amount_cents)::text, 'UTF8'))
       FROM shop.orders;
  END IF;
END $$;
