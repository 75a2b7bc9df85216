async fn place_order(request_id: String, body_hash: u64) -> Result<OrderId, AppError> {
    match ::lockcore::__private::idempotent(
            ::lockcore::__private::default_manager(),
            ::std::format!("order:req:{}", request_id),
            ::lockcore::__private::Record {
                ttl_ms: 86400000u64,
                wait_ms: ::core::option::Option::None,
                fingerprint: ::core::option::Option::Some(
                    ::std::string::ToString::to_string(&(body_hash)),
                ),
            },
            async move {
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop
                )]
                if false {
                    let __idem_ret: Result<OrderId, AppError> = loop {};
                    return __idem_ret;
                }
                insert_order(&request_id).await
            },
        )
        .await
    {
        ::core::result::Result::Ok(__idem_value) => __idem_value,
        ::core::result::Result::Err(__idem_error) => {
            <Result<
                OrderId,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__idem_error)
        }
    }
}
