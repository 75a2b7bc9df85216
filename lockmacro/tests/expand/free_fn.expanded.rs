/// Creates an order.
#[must_use]
pub(crate) async fn create_order(
    product_id: u64,
    user_id: u64,
) -> Result<OrderId, AppError> {
    let __lock_key: ::std::string::String = ::std::format!(
        "order:lock:product:{}", product_id
    );
    let __lock_manager: ::lockcore::LockManager = match ::lockcore::__private::default_manager() {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                OrderId,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let __lock_options = ::lockcore::__private::with_key_template(
        ::lockcore::__private::options(
            &__lock_manager,
            ::core::option::Option::Some(10000u64),
            ::core::option::Option::None,
            true,
        ),
        "order:lock:product:<product_id>",
    );
    let __lock_guard = match ::lockcore::__private::acquire(
            &__lock_manager,
            &__lock_key,
            &__lock_options,
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
    let __lock_outcome = ::lockcore::__private::run_body(
            &__lock_guard,
            ::lockcore::__private::OnLost::Abort,
            async move {
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
            },
        )
        .await;
    match ::lockcore::__private::finish(__lock_guard, __lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                OrderId,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
