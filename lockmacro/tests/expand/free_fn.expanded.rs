/// Creates an order.
#[must_use]
pub(crate) async fn create_order(
    product_id: u64,
    user_id: u64,
) -> Result<OrderId, AppError> {
    let __lock = match ::lockcore::__private::lock(
            ::lockcore::__private::default_manager(),
            [::std::format!("order:lock:product:{}", product_id)],
            ::lockcore::__private::Settings {
                ttl_ms: ::core::option::Option::Some(10000u64),
                wait_ms: ::core::option::Option::None,
                watchdog: ::core::option::Option::None,
                reentrant: true,
                on_lost: ::lockcore::__private::OnLost::Abort,
                key_template: "order:lock:product:<product_id>",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                OrderId,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let __lock_outcome = __lock
        .run(async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop
            )]
            if false {
                let __lock_ret: Result<OrderId, AppError> = loop {};
                return __lock_ret;
            }
            let stock = load_stock(product_id).await?;
            place_order(stock, user_id).await
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                OrderId,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
