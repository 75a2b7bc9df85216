async fn nightly() -> Result<(), AppError> {
    let __lock = match ::lockcore::__private::lock(
            ::lockcore::__private::default_manager(),
            [::std::string::String::from("job:nightly")],
            ::lockcore::__private::Settings {
                ttl_ms: ::core::option::Option::None,
                wait_ms: ::core::option::Option::Some(0u64),
                watchdog: ::core::option::Option::None,
                reentrant: false,
                on_lost: ::lockcore::__private::OnLost::Abort,
                key_template: "job:nightly",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return ::lockcore::__private::skip(__lock_error, "job:nightly");
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
                let __lock_ret: Result<(), AppError> = loop {};
                return __lock_ret;
            }
            run_report().await
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                (),
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
