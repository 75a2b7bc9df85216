async fn add_to_cart(id: UserId, item: Item) -> Result<Cart, Error> {
    let __lock = match ::lockcore::__private::lock(
            ::lockcore::__private::default_manager(),
            [::std::format!("{{user:{}}}:cart<v2>", id)],
            ::lockcore::__private::Settings {
                ttl_ms: ::core::option::Option::None,
                wait_ms: ::core::option::Option::None,
                watchdog: ::core::option::Option::None,
                reentrant: true,
                on_lost: ::lockcore::__private::OnLost::Abort,
                key_template: "{user:<id>}:cart<<v2>",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                Cart,
                Error,
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
                let __lock_ret: Result<Cart, Error> = loop {};
                return __lock_ret;
            }
            cart(id).add(item).await
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                Cart,
                Error,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
