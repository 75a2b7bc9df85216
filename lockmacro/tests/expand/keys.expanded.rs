async fn transfer(from: u64, to: u64, amount: i64) -> Result<Vec<u64>, AppError> {
    let __lock = match ::lockcore::__private::lock(
            ::lockcore::__private::default_manager(),
            [::std::format!("acct:{}", to), ::std::format!("acct:{}", from)],
            ::lockcore::__private::Settings {
                ttl_ms: ::core::option::Option::Some(5000u64),
                wait_ms: ::core::option::Option::None,
                watchdog: ::core::option::Option::None,
                reentrant: true,
                on_lost: ::lockcore::__private::OnLost::Abort,
                key_template: "acct:<to>, acct:<from>",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                Vec<u64>,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let held: &::lockcore::MultiGuard = __lock.guards();
    let __lock_outcome = __lock
        .run(async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop
            )]
            if false {
                let __lock_ret: Result<Vec<u64>, AppError> = loop {};
                return __lock_ret;
            }
            move_money(from, to, amount).await?;
            Ok(held.fencing_tokens())
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                Vec<u64>,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
